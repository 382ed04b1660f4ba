"""Clustered calls on the local engine: a gang of simulated nodes started, watched, restarted
and ended as one (`gang.py`), elastic gangs (`elastic.py`), Ray gangs (`ray_gang.py`) and the
Ray clusters kept after them (`kept_clusters.py`), hang diagnosis (`hang.py`), why a start
failed (`failures.py`), the largest gang the machine holds (`limits.py`), and each node's
control socket (`node_link.py`) and network namespace (`node_net.py`).

This module is the package's one door: the local engine imports the names in ``__all__``,
never a module inside (`tests/unit/test_layers.py`).
"""

from shoal._engines.local.gangs.elastic import ElasticGangRunner
from shoal._engines.local.gangs.gang import LAUNCHER, GangRunner, pid_namespace_prefix
from shoal._engines.local.gangs.kept_clusters import KeptClusters
from shoal._engines.local.gangs.limits import check_gang
from shoal._engines.local.gangs.node_net import node_nets

__all__ = ["LAUNCHER", "ElasticGangRunner", "GangRunner", "KeptClusters", "check_gang",
           "node_nets", "pid_namespace_prefix"]
