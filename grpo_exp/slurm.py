"""`launcher=slurm`: one SLURM job through submitit, one task per node. Each task runs
`node_task`, which takes its node's share of the same plan the driver printed (torchrun with
rendezvous on the job's first host; on node 0 also the vLLM server) via launch.run_node.

The driver composes and freezes the config once; tasks read that file from the shared run dir.
Needs the `slurm` extra (submitit).
"""

import logging
import signal
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp import rundir
from grpo_exp.placement import Plan

log = logging.getLogger(__name__)


def executor(cfg: DictConfig, run_dir: Path, plan: Plan, cluster: str | None = None):
    """A submitit executor for this run. cluster=None: SLURM (sbatch); "local": this machine,
    one local task per node, for rehearsing the launcher without a cluster."""
    import submitit

    s = cfg.launcher.slurm
    ex = submitit.AutoExecutor(folder=run_dir / "slurm", cluster=cluster)
    local = ex.cluster == "local"
    params = {
        "name": f"grpo_exp-{cfg.experiment}",
        "timeout_min": s.time_min,
        "nodes": 1 if local else cfg.topology.nnodes,
        "tasks_per_node": cfg.topology.nnodes if local else 1,  # one task = one node's share
        "cpus_per_task": s.cpus_per_task,
    }
    if plan.gpus_per_node:
        params["gpus_per_node"] = plan.gpus_per_node
    if s.mem_gb is not None:
        params["mem_gb"] = s.mem_gb
    slurm_only = {"slurm_partition": s.partition, "slurm_account": s.account, "slurm_qos": s.qos, "slurm_constraint": s.constraint}
    params.update({k: v for k, v in slurm_only.items() if v is not None})
    if s.additional:
        params["slurm_additional_parameters"] = OmegaConf.to_container(s.additional)
    ex.update_parameters(**params)
    return ex


def submit(cfg: DictConfig, run_dir: Path, plan: Plan):
    job = executor(cfg, run_dir, plan, cfg.launcher.slurm.cluster).submit(node_task, str(run_dir / rundir.CONFIG))
    log.info("submitted job %s (%d node(s)); logs in %s", job.job_id, cfg.topology.nnodes, run_dir / "slurm")
    return job


class _SacctOnce(logging.Filter):
    """submitit warns "Bypassing sacct error" at every poll on a cluster without accounting: say it
    once, at debug level (job states still come from squeue)."""

    said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "Bypassing sacct error" not in record.getMessage():
            return True
        if not _SacctOnce.said:
            _SacctOnce.said = True
            log.debug("sacct fails here (no SLURM accounting); submitit reads job states from squeue: %s", record.getMessage())
        return False


def submit_and_wait(cfg: DictConfig, run_dir: Path, plan: Plan) -> int:
    """Submit, wait, and cancel the job if the driver is stopped (Ctrl-C, SIGTERM, SIGHUP): no job
    outlives its driver."""
    submitit_log = logging.getLogger("submitit")
    quiet = _SacctOnce()
    submitit_log.addFilter(quiet)
    job = submit(cfg, run_dir, plan)
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        codes = job.results()  # one per task (node)
    except KeyboardInterrupt:
        job.cancel(check=False)
        log.warning("driver stopped: cancelled job %s", job.job_id)
        return rundir.EXIT_INTERRUPTED
    except Exception as exc:  # submitit raises when a task failed
        log.error("job %s failed: %s", job.job_id, str(exc).splitlines()[0] if str(exc) else exc)
        return rundir.EXIT_FAILED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        submitit_log.removeFilter(quiet)
    return max(codes, key=lambda c: c != 0)


def _raise_interrupt(*_):
    raise KeyboardInterrupt


def node_task(config_path: str) -> int:
    """Runs inside the SLURM task of one node: this node's share of the plan."""
    import submitit

    from grpo_exp import launch, placement

    env = submitit.JobEnvironment()
    cfg = OmegaConf.load(config_path)
    # Where this task sits is only known inside the job: the node index, and the first host as
    # the rendezvous (and vLLM server) address. node_rank is left out of the fingerprint check.
    cfg.topology.node_rank = env.global_rank
    cfg.topology.master_addr = env.hostnames[0] if len(env.hostnames) > 1 else "127.0.0.1"
    if cfg.vllm.nodes:  # the last node serves: trainers reach it, and it listens, at its own address
        cfg.vllm.server_host = env.hostnames[-1]
    run_dir = Path(config_path).parent
    plan = placement.make_plan(cfg, config_path, detected_gpus=launch.visible_gpus())
    log_name = rundir.LOG if env.global_rank == 0 else f"train.node{env.global_rank}.log"
    return launch.run_node(cfg, run_dir, plan.nodes[env.global_rank], log_path=run_dir / log_name)
