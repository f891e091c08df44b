"""launcher.slurm.*: the options of launcher=slurm, their types and the values each may take. The schema's
`launcher` section is made of every launcher's config module (config/launcher_options.py finds them)."""

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from grpo_exp.config.bounds import at_least


@dataclass
class Config:
    cluster: Optional[str] = (
        None  # null = SLURM (sbatch); local = submitit's local executor, to rehearse on one machine
    )
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time_min: int = 240  # job time limit, minutes
    cpus_per_task: int = 16
    mem_gb: Optional[int] = None
    constraint: Optional[str] = None
    additional: Dict[str, Any] = field(default_factory=dict)  # any other sbatch option, name -> value
    # Long runs: SLURM sends SIGUSR2 this long before the time limit; the ranks save a checkpoint and
    # the job requeues itself (up to max_requeues times) and resumes from it.
    signal_delay_s: int = 120
    max_requeues: int = 3
    # Sweeps: trials run as concurrent jobs, at most max_parallel at once. wait=false submits and
    # returns with the job ids (grpo-exp compare <dirs> follows them).
    max_parallel: int = 4
    wait: bool = True


CHOICES: dict = {}
RANGES = {
    "time_min": at_least(1),
    "cpus_per_task": at_least(1, 4096),
    "mem_gb": at_least(1),
    "signal_delay_s": at_least(1),
    "max_requeues": at_least(0, 1000),
    "max_parallel": at_least(1, 4096),
}
