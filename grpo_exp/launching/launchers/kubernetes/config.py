"""launcher.kubernetes.*: the options of launcher=kubernetes, their types and the values each may take. The schema's
`launcher` section is made of every launcher's config module (config/launcher_options.py finds them)."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from grpo_exp.config.bounds import above, at_least


@dataclass
class Config:
    """launcher=kubernetes (manifests.py): the objects the plan becomes, and where they run."""

    kind: str = "auto"  # auto: TrainJob without a vLLM server, JobSet with one | trainjob | jobset
    job_name: Optional[str] = None  # null: grpo-<experiment>-<6 hex of the run dir>
    namespace: str = "default"
    image: Optional[str] = None  # an image with grpo_exp and the stack installed
    image_pull_policy: str = "IfNotPresent"
    runtime: str = "torch-distributed"  # the ClusterTrainingRuntime a TrainJob names
    queue: Optional[str] = None  # Kueue's LocalQueue: label kueue.x-k8s.io/queue-name
    service_account: Optional[str] = None
    node_selector: Dict[str, str] = field(default_factory=dict)
    tolerations: List[Dict[str, Any]] = field(default_factory=list)  # core/v1 Toleration objects
    volume: Optional[str] = None  # a PersistentVolumeClaim for run dirs and checkpoints; null: emptyDir
    mount_path: str = "/runs"  # the run dir is <mount_path>/<job name>
    gpu_resource: str = "nvidia.com/gpu"
    cpus_per_process: int = 8  # CPU cores requested per training process and per vLLM GPU
    memory_headroom: float = 1.2  # memory limit = the host RAM planned for the pod x this
    max_restarts: int = 3  # recreated this often after a failure or eviction (runs resume from a checkpoint)
    poll_s: float = 10.0


CHOICES = {
    "kind": ("auto", "trainjob", "jobset"),
    "image_pull_policy": ("Always", "IfNotPresent", "Never"),
}
RANGES = {
    "cpus_per_process": at_least(1, 1024),
    "memory_headroom": at_least(1, 100),
    "max_restarts": at_least(0, 1000),
    "poll_s": above(0),
}
