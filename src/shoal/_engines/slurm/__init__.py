"""The Slurm engine: the driver runs where `shoal run` runs; each task call is one sbatch
allocation whose steps start the node launchers (see `engine` for the flow, `script` for what
a call becomes, `shoal._runtime.node.allocation` for what runs inside the allocation)."""
