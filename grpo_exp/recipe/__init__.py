"""Import a TRL / open-r1 recipe as a Hydra experiment: the run a user already has, as one checked,
planned grpo_exp config.

    grpo-exp recipe recipe.yaml --accelerate zero3.yaml --out conf/experiment/my_run.yaml
    python -m grpo_exp experiment=my_run action=plan          # its plan; any key can still be overridden

`recipe.yaml` is what `trl grpo --config` and open-r1's `grpo.py --config` read: TRL's ModelConfig,
ScriptArguments and GRPOConfig fields side by side (open-r1 adds dataset_prompt_column,
system_prompt, reward_funcs, ...), in the forms of every TRL release since 0.14 (`vllm_device`,
`use_vllm` without a mode, ...). `--accelerate` is the accelerate config it was launched with
(processes, machines, DeepSpeed stage and offload, mixed precision), `--num-processes` /
`--num-machines` what the launch command line said instead, `--deepspeed` a DeepSpeed JSON.

Every field lands at its grpo_exp key with the source key in a comment (config/keys.py holds the
homes of names that are not GRPOConfig fields); a field that never changed a GRPO run (TRL's parser
ignored it) is noted in the experiment. The importer then composes what it would write, as
`experiment=<name>` will: an experiment that does not compose is not written. A field with no home
(or a value its home refuses) is listed and the import exits 2, unless `--skip <field>` says to leave
it out (it is then written as a comment, not dropped silently).
"""

import argparse
import sys
from pathlib import Path

from grpo_exp import Problem
from grpo_exp.recipe.experiment import Experiment, RecipeError, compose_problems, inline, load, plain, render
from grpo_exp.recipe.fields import (
    OPEN_R1_DEFAULT_REWARDS,
    OPEN_R1_KEYS,
    recipe_field,
    reconcile_weights,
    rewards,
)
from grpo_exp.recipe.later_fields import resolve_later
from grpo_exp.recipe.launch import accelerate_config, deepspeed_json, to_int


def build(
    recipe: dict,
    accelerate: dict | None,
    deepspeed: dict | None,
    name: str,
    skip: set[str],
    num_processes=None,
    num_machines=None,
) -> Experiment:
    exp = Experiment(name, skip=set(skip))
    for key, value in recipe.items():
        if not isinstance(key, str):  # YAML reads `1:` or `true:` as a number or a boolean
            exp.lack(repr(key), "not a field name")
        elif key in skip:
            exp.skipped[key] = inline(value)
        else:
            recipe_field(exp, key, plain(value))
    if "reward_funcs" not in recipe and OPEN_R1_KEYS & set(recipe):  # open-r1's script uses its defaults
        rewards(exp, OPEN_R1_DEFAULT_REWARDS, "reward_funcs (open-r1's default)")
    reconcile_weights(exp, recipe)
    _nest_model_init_kwargs(exp)
    trainers = to_int(num_processes if num_processes is not None else (accelerate or {}).get("num_processes"))
    resolve_later(exp, trainers)
    if accelerate or num_processes is not None or num_machines is not None:
        accelerate_config(exp, accelerate or {}, num_processes, num_machines)
    if deepspeed:
        deepspeed_json(exp, deepspeed, "--deepspeed")
    for source in list(exp.no_home):
        if source.split(": ")[0].removeprefix("accelerate ") in skip or source in skip:
            exp.skipped[source] = exp.no_home.pop(source)
    for source in exp.no_home:  # nothing a refused field set stays behind
        exp.drop(source.split(": ")[0])
    return exp


def _nest_model_init_kwargs(exp: Experiment) -> None:
    """A renamed field written inside model_init_kwargs (use_liger_kernel's use_kernels) joins the recipe's own
    model_init_kwargs mapping, if it has one (the YAML holds one node there, not both)."""
    whole = exp.values.get("trainer.model_init_kwargs")
    inner = [k for k in exp.values if k.startswith("trainer.model_init_kwargs.")]
    if not inner or whole is None:
        return
    value, source = whole
    if not isinstance(value, dict):
        return
    merged = dict(value)
    for key in inner:
        merged[key.rsplit(".", 1)[-1]] = exp.values.pop(key)[0]
    exp.values["trainer.model_init_kwargs"] = (
        merged,
        f"{source}, with {', '.join(k.rsplit('.', 1)[-1] for k in inner)}",
    )


def _skip_fix(source: str) -> str:
    """The --skip that leaves a refused field out: one reward of reward_funcs by its name (its weight goes with it)."""
    field_name, _, detail = source.partition(": ")
    if field_name.startswith("reward_funcs") and detail:
        return f"--skip {detail} to leave that reward out (its reward_weights entry too), or --skip reward_funcs"
    return f"--skip {field_name.removeprefix('accelerate ')} to leave it out"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="grpo-exp recipe",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("recipe", type=Path, help="a TRL / open-r1 GRPO recipe (YAML, as `trl grpo --config` reads)")
    parser.add_argument("--accelerate", type=Path, help="the accelerate config the recipe was launched with")
    parser.add_argument(
        "--num-processes", help="accelerate launch --num_processes: trainers in all (overrides the file)"
    )
    parser.add_argument("--num-machines", help="accelerate launch --num_machines (overrides the file)")
    parser.add_argument("--deepspeed", type=Path, help="a DeepSpeed JSON (or YAML) config")
    parser.add_argument(
        "--out",
        type=Path,
        help="where the experiment goes (default: ./conf/experiment/<recipe name>.yaml, which the driver searches)",
    )
    parser.add_argument(
        "--skip", action="append", default=[], help="a field with no grpo_exp home to leave out (repeatable)"
    )
    args = parser.parse_args(argv)
    out = args.out or Path("conf") / "experiment" / f"{args.recipe.stem}.yaml"
    try:
        recipe = load(args.recipe)
        accelerate = load(args.accelerate) if args.accelerate else None
        deepspeed = load(args.deepspeed) if args.deepspeed else None
    except RecipeError as exc:
        print(f"grpo-exp recipe: {exc}", file=sys.stderr)
        return 2
    for flag, value in (("--num-processes", args.num_processes), ("--num-machines", args.num_machines)):
        if value is not None and (to_int(value) or 0) < 1:
            print(f"grpo-exp recipe: {flag} {value!r}: a whole number >= 1", file=sys.stderr)
            return 2
    exp = build(recipe, accelerate, deepspeed, out.stem, set(args.skip), args.num_processes, args.num_machines)
    sources = [str(p) for p in (args.recipe, args.accelerate, args.deepspeed) if p]
    refused = [Problem(source, why, _skip_fix(source)) for source, why in exp.no_home.items()]
    refused += compose_problems(exp, sources)
    if refused:
        print(
            f"grpo-exp recipe: {len(refused)} field(s) of the recipe do not carry over; nothing written:",
            file=sys.stderr,
        )
        for problem in refused:
            print(f"  {problem}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(exp, sources))
    print(f"wrote {out}: {len(exp.values)} value(s), {len(exp.groups)} group choice(s), {len(exp.skipped)} skipped")
    for note in exp.notes:
        print(f"  {note}")
    for source, why in exp.ignored.items():
        print(f"  ignored, as TRL ignores it: {source}: {why}")
    print(f"  python -m grpo_exp experiment={out.stem} action=plan")
    return 0
