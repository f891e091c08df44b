"""Stage 3, launching: torchrun on this machine or SLURM, the vLLM server beside training, its agent on
dedicated nodes, free ports, and the cross-node checks that turn a hang into an error."""
