"""``shoal.plugins.pytorch``: what Flyte 2 code imports as ``flyteplugins.pytorch``.

``Elastic`` and ``RunPolicy`` (see `shoal.plugins.pytorch.task`): ``TaskEnvironment(
plugin_config=Elastic(nnodes="1:4", nproc_per_node=8))`` runs the environment's tasks as an
elastic torch gang, the same one ``shoal.clustered.ClusteredTaskEnvironment(replicas=4,
min_replicas=1, nproc_per_node=8)`` runs. ``ElasticSampler`` (also in ``shoal.clustered``)
is a data order for such a gang: each sample of an epoch once, across its resizes.
"""

from shoal.clustered import ElasticSampler
from shoal.plugins.pytorch.task import Elastic, RunPolicy

__all__ = ["Elastic", "ElasticSampler", "RunPolicy"]
