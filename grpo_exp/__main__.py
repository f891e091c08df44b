"""grpo_exp driver: compose the config once, check it, freeze it into the run dir, launch, report.

    python -m grpo_exp                                   # tiny model, this machine, a few GRPO steps
    python -m grpo_exp model=qwen7b topology=1x8 deepspeed=zero3 vllm=colocate
    python -m grpo_exp -m trainer.per_device_train_batch_size=2,4 trainer.num_generations=4,8
    python -m grpo_exp --cfg job                         # the composed config, nothing run
    python -m grpo_exp --help                            # groups and options

Only this process calls Hydra. Training processes read <run dir>/config.yaml.
Exit codes (also summary.json["exit_code"]): 0 completed, 1 failed, 2 invalid config, 4 out of memory,
130 interrupted.
"""

import logging
import os
import shutil
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from grpo_exp import errors, launch, rundir
from grpo_exp.schema import register_configs
from grpo_exp.validate import validate

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
log = logging.getLogger("grpo_exp")
_exit_codes: list[int] = []  # one per job; hydra.main does not return the task's value


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def run(cfg: DictConfig) -> int:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    gpus = launch.visible_gpus()
    nprocs = launch.world_size(cfg, gpus)
    problems = validate(cfg, world_size=nprocs, gpus=gpus)
    if problems:
        _remove_if_empty(run_dir)  # a rejected config leaves nothing behind but the error
        errors.report("\n".join(map(str, problems)))
        _exit_codes.append(rundir.EXIT_INVALID)
        return rundir.EXIT_INVALID

    rundir.freeze_config(cfg, run_dir)
    rundir.write_summary(run_dir, status="running", world_size=nprocs)
    log.info("run dir %s (%d process(es), %s)", run_dir, nprocs, f"{gpus} GPU(s)" if gpus else "CPU")
    started = time.time()
    code = launch.run_local(cfg, run_dir, nprocs)
    summary = _finish(run_dir, code, time.time() - started)
    log.info("%s in %.1fs -> %s", summary["status"], summary["wall_s"], run_dir / rundir.SUMMARY)
    _exit_codes.append(summary["exit_code"])
    return summary["exit_code"]


def _finish(run_dir: Path, code: int, wall_s: float) -> dict:
    """Final summary.json: rank 0's, or, if no rank 0 got to write one, the ranks' own records."""
    if rundir.read_summary(run_dir).get("status") not in (None, "running"):
        return rundir.write_summary(run_dir, wall_s=wall_s)
    cause = rundir.root_cause(run_dir)
    if cause is not None:
        return rundir.write_summary(run_dir, **cause, wall_s=wall_s)
    if code == rundir.EXIT_INTERRUPTED:
        return rundir.write_summary(run_dir, status="interrupted", wall_s=wall_s)
    return rundir.write_summary(
        run_dir, status="failed", wall_s=wall_s,
        error=f"training processes exited with code {code} without a result; see {run_dir / rundir.LOG}",
    )


def _remove_if_empty(run_dir: Path) -> None:
    """Remove a run dir holding only what Hydra put there before our code ran."""
    if run_dir.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)


def main() -> None:
    # Let Hydra's own config errors (unknown option/key, bad type) reach us as exceptions, so they
    # are reported like ours: the key, the valid options, exit 2, no traceback.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    register_configs()
    try:
        run()
    except (HydraException, OmegaConfBaseException) as exc:
        errors.report(errors.explain(exc))
        sys.exit(rundir.EXIT_INVALID)
    if not _exit_codes:  # --cfg, --help, --info: nothing ran
        sys.exit(0)
    if len(_exit_codes) == 1:
        sys.exit(_exit_codes[0])
    sys.exit(0 if all(c == 0 for c in _exit_codes) else max(_exit_codes))


if __name__ == "__main__":
    main()
