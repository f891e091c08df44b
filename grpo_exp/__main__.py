"""grpo-exp: one command for a GRPO run and the tools beside it.

    grpo-exp                                            # = python -m grpo_exp: tiny model, this machine, GRPO steps
    grpo-exp model=qwen7b topology=1x8 deepspeed=zero3 vllm=colocate
    grpo-exp -m trainer.per_device_train_batch_size=2,4 trainer.num_generations=4,8
    grpo-exp model=qwen7b topology=2x8 vllm=server action=plan    # plan.json, nothing run
    grpo-exp --cfg job | --help                         # the composed config | groups and options
    grpo-exp compare|dashboard|recipe|model-info|calibrate ...     # each with --help

A first word naming a command runs that command (torchtune's `tune` does the same) before Hydra reads
the command line; anything else is a run, composed by Hydra. This module is the only Hydra caller:
launching/job.py is the job itself, and training processes read <run dir>/config.yaml.

Exit codes of a single run (also summary.json["exit_code"]): 0 completed, 1 failed, 2 invalid config,
3 predicted OOM, 4 out of memory, 5 hang prevented (nodes disagree, a node never joined, training
stalled), 75 preempted (a checkpoint was saved: resume it), 130 interrupted. A multirun (-m, or a
+sweep= preset) exits 0 once every trial ran, whatever their statuses, and prints a table of them
(results/sweep_report.py, a Hydra callback).
"""

import importlib
import os
import sys
import warnings
from pathlib import Path

from grpo_exp import imports_frozen

with imports_frozen():  # loaded with the garbage collector paused, then frozen: ~0.1 s of every start
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from grpo_exp import CONF_DIR, Problem
    from grpo_exp.config import errors, overrides
    from grpo_exp.config.registry import register_configs
    from grpo_exp.core import outcome, plain, rundir
    from grpo_exp.launching import job
    from grpo_exp.results import report
    from hydra_plugins.grpo_exp_frontier.frontier_sweeper import FrontierSweeper

# grpo-exp <command> ...: each command's code lives in its stage, with its own --help.
COMMANDS = {
    "compare": "grpo_exp.results.compare",  # runs side by side: table, heatmap, HTML report
    "dashboard": "grpo_exp.results.dashboard",  # W&B workspace views and reports
    "recipe": "grpo_exp.recipe",  # a TRL / open-r1 recipe as an experiment: ./conf/experiment/<name>.yaml
    "model-info": "grpo_exp.models.model_option",  # a model's numbers as an option: ./conf/model/<name>.yaml
    "calibrate": "grpo_exp.results.calibrate",  # the planner's correction factors from measured runs
}


def main() -> None:
    argv = sys.argv[1:]
    if argv and argv[0] in COMMANDS:
        sys.exit(importlib.import_module(COMMANDS[argv[0]]).main(argv[1:]) or 0)
    # Hydra's own config errors (unknown option/key, bad type) reach us as exceptions, reported like ours:
    # the key, the valid options, exit 2, no traceback.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    # conf/config.yaml searches ./conf (a user's experiments and models) where there is one; Hydra warns
    # wherever there is none
    warnings.filterwarnings("ignore", message="provider=hydra.searchpath in main, path=conf is not available")
    register_configs()
    register_plugins()
    argv = [deepspeed_override(arg) for arg in argv]
    given = overrides.command_line(argv)
    unknown = overrides.unknown(given)  # every unknown key at once, the rest still composed and checked
    whole = overrides.whole_mappings(given)  # 'data.rewards={...}': set after composing, replacing the option's
    sys.argv[1:] = [arg for arg in argv if arg not in unknown and arg not in whole]
    problems = list(unknown.values())
    run_dir = None if "-m" in argv or "--multirun" in argv else _run_dir_argument(given)
    reused = job.reused_run_dir(run_dir) if run_dir is not None else None
    if reused:  # before Hydra writes its .hydra/ record into that run's dir
        _exit_invalid([*problems, reused])
    if not overrides.mode_needs_compose(argv):
        _skip_mode_compose()
    ran: list[job.Ended] = []
    app = hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(
        _task(problems, ran, list(whole.values()))
    )
    try:
        app()
    except (HydraException, OmegaConfBaseException, ValueError, OverflowError) as exc:
        if ran:  # a job ran: not a config error
            raise
        _exit_invalid([*problems, errors.explain(exc)])
    if not ran and problems:  # --cfg job, --help: nothing ran, yet keys are wrong
        _exit_invalid(problems)
    sys.exit(0)  # a multirun whose trials all ran, or --cfg, --help, --info


def register_plugins() -> None:
    """grpo_exp's frontier sweeper, registered with Hydra where the command starts: through Hydra's API rather than
    its scan of the hydra_plugins namespace, which cannot see into setuptools' editable installs (hydra#2359).
    Importing the module also stores its `hydra/sweeper: frontier` node. Here, not in the schema: the sweeper
    plans and launches trials, the last stage of the house, which the config stage must not import."""
    from hydra.core.plugins import Plugins

    Plugins.instance().register(FrontierSweeper)


def _task(unknown: list[Problem], ran: list, whole: list[tuple[str, dict]]):
    """Hydra's task function: one job (one trial of a multirun). A single run ends the process with its
    exit code after its report; a trial returns the sweep's objective. `whole`: (key, mapping) set as given,
    replacing what the options composed (overrides.whole_mappings)."""

    def task(cfg: DictConfig) -> float:
        overrides.set_whole(cfg, whole)
        hydra_cfg = HydraConfig.get()
        sweeping = hydra_cfg.mode == RunMode.MULTIRUN
        experiment = _option_file(hydra_cfg, "experiment", hydra_cfg.runtime.choices.get("experiment"))  # read once
        spec = job.Job(
            cfg,
            Path(hydra_cfg.runtime.output_dir) / rundir.node_subdir(cfg.topology.node_rank),
            sweeping=sweeping,
            explicit=explicit_keys(hydra_cfg, experiment) | {key for key, _ in whole},
            unknown=unknown,
            overrides=task_overrides(hydra_cfg),
            independent_trials=_trials_independent(hydra_cfg),
            notes=held_options(cfg, hydra_cfg, experiment),
        )
        ended = job.run(spec)
        ran.append(ended)
        if sweeping:  # results/sweep_report.py prints the table once every trial ran
            return ended.objective(cfg.optimized_metric, _direction(hydra_cfg, cfg.optimized_metric))
        if ended.launched and ended.run_dir is not None:
            report.print_report(ended.run_dir, ended.summary)
        raise SystemExit(ended.code)

    return task


def _direction(hydra_cfg, metric: str) -> str:
    """The sweeper's own direction (Optuna's `direction`, an enum or its name), else the metric's (rundir)."""
    given = hydra_cfg.sweeper.get("direction")
    given = given[0] if isinstance(given, (list, tuple)) or OmegaConf.is_list(given) else given
    return str(given).rsplit(".", 1)[-1] if given is not None else rundir.direction(metric)


def _trials_independent(hydra_cfg) -> bool:
    """Hydra's basic sweeper fixes every trial up front, and the frontier sweeper launches one probe
    per num_generations line at a time and gathers them (slurm.gather) before choosing the next:
    their trials may run at once. Optuna picks each trial from the last result."""
    return hydra_cfg.sweeper._target_.rsplit(".", 1)[-1] in ("BasicSweeper", "FrontierSweeper")


def task_overrides(hydra_cfg) -> list[str]:
    """This job's command-line overrides as written: iterating Hydra's list would resolve an override's
    own `${...}` text, and fail on one that names an unset variable (that is the job's check to report)."""
    return [str(item) for item in plain.sequence(hydra_cfg.overrides.task, resolve=False)]


def explicit_keys(hydra_cfg, experiment: dict) -> set[str]:
    """The keys this job's user set: on the command line, and in the experiment file it selected (its content)."""
    found = set(overrides.values(task_overrides(hydra_cfg)))
    return found | {k for k in overrides.flat(experiment) if not k.startswith(("defaults", "hydra"))}


def held_options(cfg: DictConfig, hydra_cfg, experiment: dict) -> list[str]:
    """The command line over the experiment it selected (overrides.hold_command_line; `experiment`: its content): a
    group option chosen again keeps its values, every key given keeps the command line's; the note names what the
    experiment lost."""
    if not experiment:
        return []
    given = task_overrides(hydra_cfg)
    chosen = {}
    for group, option in overrides.chosen_groups(given).items():
        content = _option_file(hydra_cfg, group, option)
        chosen[group] = (option, overrides.flat(content if content.get("_global_package") else {group: content}))
    return overrides.hold_command_line(cfg, experiment, chosen, overrides.given_keys(given))


def _option_file(hydra_cfg, group: str, option: str | None) -> dict:
    """An option's YAML as written ({} where there is none): grpo_exp's conf/ or a search path's (./conf).
    `_global_package` is set on an option that writes at the top level (# @package _global_)."""
    sources = [CONF_DIR] + [
        Path(s.path.removeprefix("file://")) for s in hydra_cfg.runtime.config_sources if s.provider != "hydra"
    ]
    for source in sources:
        path = source / group / f"{option}.yaml"
        if option and path.is_file():
            text = path.read_text()
            content = plain.mapping(OmegaConf.create(text), resolve=False)
            if "@package _global_" in text.split("\n", 1)[0]:
                content["_global_package"] = True
            return content
    return {}


def _run_dir_argument(items: list[str]) -> Path | None:
    """hydra.run.dir given among the overrides of a single run (not a sweep, not a resume)."""
    parsed = {o.key_or_group: o.value() for o in overrides.parse(items)}
    if "hydra.run.dir" not in parsed or "resume" in parsed:
        return None
    rank = str(parsed.get("topology.node_rank", os.environ.get("NODE_RANK", "0")))  # conf/config.yaml's default
    return Path(str(parsed["hydra.run.dir"])).expanduser() / rundir.node_subdir(int(rank) if rank.isdigit() else 0)


def deepspeed_override(arg: str) -> str:
    """`deepspeed.<key>=v` -> `++deepspeed.<key>=v`: the deepspeed group is DeepSpeed's own open
    format, so any of its keys may be set without Hydra's `+` (config/config_checks.py checks them with
    DeepSpeed's config models instead)."""
    return f"++{arg}" if arg.startswith("deepspeed.") and "=" in arg else arg


def _skip_mode_compose() -> None:
    """Hydra composes the config once to read hydra.mode, then again to run. When nothing on the
    command line can set the mode (overrides.mode_needs_compose), -m alone decides: Hydra's own rule
    for a mode it could not read (`hydra._internal.utils._run_app`), without the first compose."""
    from hydra._internal.hydra import Hydra

    Hydra.get_mode = lambda self, config_name, overrides: None  # type: ignore[method-assign]  # (Hydra's own)


def _exit_invalid(problems: list) -> None:
    errors.report("\n".join(map(str, problems)))
    sys.exit(outcome.EXIT_INVALID)


if __name__ == "__main__":
    main()
