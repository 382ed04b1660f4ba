"""The sections of ``scale_engines.py``, one module each: ``launch`` (the local engine's real
ranks), ``kube`` (the Kubernetes engine following a JobSet through the fake API server),
``slurm`` (the Slurm engine's and allocation program's parsing of 1,024-node state) and
``hang`` (the local engine's hang diagnosis of simulated ranks); ``curves`` fits the log-log
slopes and draws the plot. Each section returns `curves.Curve` rows."""
