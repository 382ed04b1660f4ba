"""Metric bridges: a run's metrics forwarded, while it runs, to TensorBoard and Weights & Biases.

They run in the driver (the process running the run), each in a daemon thread of its own that
follows the run's metric files (`shoal._storage.metrics.RunMetrics`); training processes never
import them or wait for them. A bridge that raises is switched off with one warning line; one
that hangs is abandoned when the run ends (the run waits for a bridge's last drain a bounded
time). `spec.py` parses the setting, `follower.py` runs a bridge, and `tensorboard.py` and
`wandb_bridge.py` are the two bridges.
"""
