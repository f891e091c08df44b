"""launcher=slurm: one SLURM job for the whole run, one task per node (submitit).

    config.py     launcher.slurm.*: its options, their types and ranges (the config reads only this module)
    launcher.py   the launcher protocol (launchers/__init__.py): submit and wait, or submit and go on
    jobs.py       the job: submitted, followed, requeued, gathered (a sweep's trials), SLURM's refusals
    task.py       one node's task inside the job: node 0's address, the serving node, this node's share
    states.py     what SLURM says of a job (scontrol, squeue)

Nothing here is imported until a run chooses launcher=slurm, except config.py.
"""
