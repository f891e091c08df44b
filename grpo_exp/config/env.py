"""The env group (agentic runs): what it names, and every problem with it found before launch.

`env.tools` are functions, `env.factory` one environment per episode, `env.factories` one per row's
`environment` column: TRL's `tools` and `environment_factory`. Checked here, in the driver: each `_target_`
imports, an environment class has `reset` and takes the keyword arguments given, and every tool (a function,
or an environment's public method) has the type hints and Google-style docstring TRL describes it to the
model from (transformers' get_json_schema, which the chat template rendering calls). Importing them runs the
user's code: env names only code the user trusts (docs/agentic.md).
"""

import inspect

from omegaconf import DictConfig

from grpo_exp import Problem, import_failure, locate
from grpo_exp import data as loaders
from grpo_exp.core import plain

NOT_TOOLS = ("reset", "get_reward")  # an environment's public methods TRL does not offer the model
_TOOL_FIX = (
    "name a function by its dotted path (pkg.module.fn) with type hints and a docstring, "
    "e.g. grpo_exp.training.environments.calculator"
)


def active(cfg: DictConfig) -> bool:
    """Whether the run gives the policy tools or environments."""
    return bool(cfg.env.tools or cfg.env.factory or cfg.env.factories)


def label(cfg: DictConfig) -> str:
    """The env's name in plans and reports: the option's, or `custom` for tools set on env=none."""
    return "custom" if cfg.env.name == "none" and active(cfg) else cfg.env.name


def factories(cfg: DictConfig) -> dict[str, DictConfig]:
    """{config key: factory node} of env.factory and each env.factories entry."""
    found = {"env.factory": cfg.env.factory} if cfg.env.factory is not None else {}
    return {**found, **{f"env.factories.{name}": node for name, node in cfg.env.factories.items()}}


def environment_class(node) -> type | None:
    """The class a factory node names; None when its `_target_` is a function or does not import."""
    found = locate(node.get("_target_")) if isinstance(node, DictConfig) else None
    return found if isinstance(found, type) else None


def tools_of(cls: type) -> list:
    """The methods of an environment class TRL offers the model as tools (as TRL lists them)."""
    return [
        f
        for name, f in inspect.getmembers(cls, inspect.isfunction)
        if name not in NOT_TOOLS and not name.startswith("_")
    ]


def tool_names(cfg: DictConfig) -> list[str]:
    """The names the model sees: env.tools' functions, then each environment class's tools."""
    names = [path.rsplit(".", 1)[-1] for path in cfg.env.tools]
    for node in factories(cfg).values():
        cls = environment_class(node)
        names += [f.__name__ for f in tools_of(cls)] if cls is not None else []
    return list(dict.fromkeys(names))


def tool_sets(cfg: DictConfig) -> list[list[dict]]:
    """The tool schemas the model is shown, per episode kind: env.tools with each environment's tools (one set per
    environment; env.tools alone without one), as TRL describes them (transformers' get_json_schema). The tiny
    model's warm start is built from them (training/tool_warm_start.py). [] for a run without tools."""
    if not active(cfg):
        return []
    from transformers.utils import get_json_schema

    plain = [get_json_schema(locate(path)) for path in cfg.env.tools]
    classes = [environment_class(node) for node in factories(cfg).values()]
    sets = [plain + [get_json_schema(f) for f in tools_of(cls)] for cls in classes if cls is not None]
    return [s for s in sets if s] or ([plain] if plain else [])


def owns_reward(cfg: DictConfig) -> bool:
    """Whether an environment scores its episodes (get_reward): then data.rewards may be empty."""
    return any(callable(getattr(environment_class(n), "get_reward", None)) for n in factories(cfg).values())


def check(cfg: DictConfig) -> list[Problem]:
    """Every problem with the env group, all at once."""
    if not active(cfg):
        return []
    problems = []
    if cfg.env.factory is not None and cfg.env.factories:
        problems.append(
            Problem(
                "env.factory",
                "and env.factories are both set: one environment for every episode, or one per row's environment",
                "keep one of them (env.factory=null or env.factories={})",
            )
        )
    if not cfg.data.conversational:
        problems.append(
            Problem(
                "data.conversational",
                "is false: TRL finds tool calls only in chat completions (it parses them with the chat template)",
                "data.conversational=true",
            )
        )
    for i, path in enumerate(cfg.env.tools):
        tool = locate(path)
        if tool is None:
            why = f"'{path}' is not an importable function ({import_failure(path)})"
            problems.append(Problem(f"env.tools[{i}]", why, _TOOL_FIX))
            continue
        problems += _tool_problems(f"env.tools[{i}]", tool)
    for key, node in factories(cfg).items():
        problems += _factory_problems(key, node)
    return problems + _sharded_tool_loop(cfg)


def check_data_none(cfg: DictConfig) -> list[Problem]:
    """data=none: the environment owns the data, as TRL runs it without a train_dataset (grpo_trainer.py: one
    environment_factory, max_steps > 0, placeholder rows of an empty user message that reset()'s text fills)."""
    if not loaders.prompts_from_environment(cfg.data):
        return []
    problems = []
    if cfg.env.factory is None:
        why = (
            "env.factories picks each row's environment by the data's `environment` column, and there are no rows"
            if cfg.env.factories
            else "no environment gives the prompts (reset() returns each episode's prompt)"
        )
        problems.append(
            Problem("data", f"is none: {why}", "name one: env.factory='{_target_: pkg.MyEnv}', or give data")
        )
    if cfg.trainer.max_steps <= 0:
        problems.append(
            Problem(
                "trainer.max_steps",
                f"is {cfg.trainer.max_steps}: with data=none no dataset sets the run's length (TRL needs max_steps)",
                "trainer.max_steps=<optimizer steps>, e.g. trainer.max_steps=100",
            )
        )
    if cfg.data.system_prompt:
        problems.append(
            Problem(
                "data.system_prompt",
                "is set with data=none: the rows TRL builds hold only reset()'s text",
                "put the instructions in what reset() returns, or data.system_prompt=null",
            )
        )
    return problems


def _sharded_tool_loop(cfg: DictConfig) -> list[Problem]:
    """Tools or environments, generation by the trained model itself (vllm=off) and weights sharded in every forward
    (FSDP2, or ZeRO-3, whose generation gathers the weights each round): TRL's tool loop (GRPOTrainer._tool_call_loop)
    runs as many generation rounds on each rank as that rank's episodes call tools, so a rank whose episodes are done
    stops joining the others' all-gathers (measured: gloo aborts, "Is there a distributed collective mismatch";
    NCCL waits until its timeout)."""
    if not active(cfg) or cfg.vllm.mode != "off":
        return []
    zero3 = bool(cfg.deepspeed) and cfg.deepspeed.get("zero_optimization", {}).get("stage") == 3
    if not (cfg.fsdp.enabled or zero3):
        return []
    sharding = f"fsdp={cfg.fsdp.name}" if cfg.fsdp.enabled else "deepspeed ZeRO-3"
    return [
        Problem(
            "env",
            f"env={label(cfg)} with {sharding} and vllm=off: TRL's tool loop runs a different number of generation "
            "rounds on each rank, and sharded weights are gathered in each of them, so the ranks fall out of step "
            "(a crash or a hang)",
            "generate with vLLM (vllm=colocate or vllm=server: the engine holds whole weights), or shard less: "
            "fsdp=none with deepspeed=zero2 or none",
        )
    ]


def _factory_problems(key: str, node) -> list[Problem]:
    target = node.get("_target_") if isinstance(node, DictConfig) else None
    if target is None:
        return [Problem(key, f"is {node!r}: a factory is {{_target_: pkg.MyEnv, ...}}", f"set {key}._target_")]
    cls = environment_class(node)
    if cls is None:
        if callable(locate(target)):  # a function returning an environment: what, is only known at run time
            return []
        return [
            Problem(
                f"{key}._target_",
                f"'{target}' is not an importable environment class or function ({import_failure(target)})",
                "name one by its dotted path, e.g. grpo_exp.training.environments.NumberGame",
            )
        ]
    problems = []
    if not callable(getattr(cls, "reset", None)):
        problems.append(
            Problem(key, f"{cls.__name__} has no reset(): TRL starts every episode with it", "add reset(self, **row)")
        )
    kwargs = {k: v for k, v in plain.mapping(node, resolve=False).items() if k != "_target_"}
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as exc:
        problems.append(
            Problem(key, f"{cls.__name__}({', '.join(kwargs)}): {exc}", f"give {key} only what {cls.__name__} takes")
        )
    for tool in tools_of(cls):
        problems += _tool_problems(f"{key} ({cls.__name__}.{tool.__name__})", tool)
    return problems


def _tool_problems(key: str, fn) -> list[Problem]:
    """What TRL needs to describe a tool to the model, read the way transformers reads it (get_json_schema)."""
    if not callable(fn):
        return [Problem(key, f"{fn!r} is not callable", _TOOL_FIX)]
    from transformers.utils import get_json_schema

    try:
        get_json_schema(fn)
    except Exception as exc:  # transformers' DocstringParsingException / TypeHintParsingException
        return [
            Problem(
                key,
                f"TRL cannot describe it to the model: {str(exc).splitlines()[0]}",
                "give every parameter a type hint, and a docstring with a description and an Args: section",
            )
        ]
    return []
