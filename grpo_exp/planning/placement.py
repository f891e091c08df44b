"""Topology -> launch plan: per node, how many training processes, on which GPUs, which GPUs vLLM
keeps, with what environment and exact commands. Pure Python, any machine, any topology.

Rules (the multi-node failures in the field are all placement errors):
- vllm=server: `vllm.gpus` GPUs on node 0 (the first indices, as in TRL's docs) run `vllm serve` as
  `trl vllm-serve` would (serve_command); they never train. Other nodes train on all their GPUs (2x8 ->
  7+8 processes), or, with `topology.symmetric=true`, leave the same GPUs idle (7+7) for platforms that
  need equal nodes. With `vllm.nodes=1` the last node only serves, on all its GPUs (TP per engine, data
  parallel over the rest), and every other node trains on all of its GPUs (TRL's 4+1 layout).
- vllm=colocate / off: every GPU trains (colocated vLLM shares each GPU by gpu_memory_utilization).
- One process per training GPU, never nn.DataParallel; training processes never see a vLLM GPU
  (CUDA_VISIBLE_DEVICES per role; the worker's startup guard re-checks it).
- No GPU (`gpus_per_node: 0`, or none detected): `cpu_procs` processes per node over gloo.
"""

import itertools
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace

from omegaconf import DictConfig

from grpo_exp.config import env
from grpo_exp.core import gpus, plain
from grpo_exp.models.model_info import tiny_model_path
from grpo_exp.planning import network, serve_argv

WORKER = ["-m", "grpo_exp.training.worker"]


@dataclass
class NodePlan:
    node_rank: int
    train_procs: int
    train_gpus: list[int]
    vllm_gpus: list[int]
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # role (train, vllm) -> variables
    commands: dict[str, list[str]] = field(default_factory=dict)  # role -> argv


@dataclass
class Plan:
    world_size: int
    device: str  # cuda | cpu
    gpus_per_node: int
    nodes: list[NodePlan]
    vllm: dict
    # The card the memory is planned against (None on CPU): the topology's, else the one detected here, else assumed
    gpu_name: str | None = None
    gpu_memory_gib: float | None = None
    card_source: str | None = None  # topology | detected | assumed
    network: list[dict] = field(default_factory=list)  # the connections between nodes (planning/network.py)

    def to_dict(self) -> dict:
        return asdict(self)

    def server_hosts(self) -> int:
        """The training nodes that leave a vllm=server GPUs (node 0, or every node with topology.symmetric); none
        where a dedicated serving node takes it, or without a server."""
        if self.vllm["mode"] != "server" or self.vllm["nodes"]:
            return 0
        return sum(1 for n in self.nodes if n.train_procs and len(n.train_gpus) < self.gpus_per_node)


def gpus_per_node(cfg: DictConfig, detected: int) -> int:
    return detected if cfg.topology.gpus_per_node is None else cfg.topology.gpus_per_node


# What a CUDA plan assumes of a card nobody named and this machine does not have (a note says so).
ASSUMED_GPU_GIB = 80.0


def card(topology, cards: list, device: str) -> tuple[str | None, float | None, str | None]:
    """(name, GiB, source) of the card a plan is made for: topology.gpu_memory_gib where set, else the smallest of
    the cards detected here (core/gpus.py), else ASSUMED_GPU_GIB."""
    if device != "cuda":
        return None, None, None
    if topology.gpu_memory_gib is not None:
        return topology.gpu_name, float(topology.gpu_memory_gib), "topology"
    if cards:
        smallest = min(cards, key=lambda c: c.memory_gib)
        return smallest.name, smallest.memory_gib, "detected"
    return topology.gpu_name, ASSUMED_GPU_GIB, "assumed"


def card_warnings(topology, cards: list) -> list[str]:
    """The node that runs a plan holds other cards than its topology names (action=run; a SLURM job's every node): the
    plan is of other cards. The lines to warn with, none when the cards agree or none is detected here."""
    if not cards or topology.gpu_memory_gib is None:
        return []
    here = min(cards, key=lambda c: c.memory_gib)
    named = topology.gpu_name or f"{topology.gpu_memory_gib} GiB"
    other_name = topology.gpu_name and not gpus.same_card(topology.gpu_name, here.name)
    if other_name or abs(topology.gpu_memory_gib - here.memory_gib) > 0.05 * here.memory_gib:
        return [
            f"topology {topology.name} plans {named} ({topology.gpu_memory_gib} GiB) but this node has {here.name} "
            f"({here.memory_gib:.2f} GiB): the plan is of other cards (topology.gpu_memory_gib=null plans this one)"
        ]
    return []


def make_plan(cfg: DictConfig, config_path: str, detected_gpus: int, cards: Sequence = ()) -> Plan:
    """The plan for `cfg`; `detected_gpus` and the `cards` detected here matter only where the topology does
    not say."""
    # Plain values, resolved once: a config node resolves its interpolations (master_addr, ...) on every
    # read, and a 512-node plan reads them per node.
    topo, vllm = SimpleNamespace(**plain.mapping(cfg.topology)), cfg.vllm
    gpus = gpus_per_node(cfg, detected_gpus)
    server = vllm.mode == "server"
    dedicated = vllm.nodes if server else 0  # serving nodes, the last ones
    serving_node = (topo.nnodes - 1 if dedicated else 0) if server else None
    reserved = (gpus if dedicated else (vllm.gpus or 1)) if server else 0
    nodes = []
    for node_rank in range(topo.nnodes):
        if dedicated and node_rank == serving_node:
            nodes.append(NodePlan(node_rank, 0, [], list(range(gpus))))
            continue
        leaves_idle = reserved if not dedicated and (node_rank == 0 or topo.symmetric) else 0
        train_gpus = list(range(leaves_idle, gpus))
        vllm_gpus = list(range(min(reserved, gpus))) if node_rank == serving_node else []  # none on CPU
        procs = len(train_gpus) if gpus else topo.cpu_procs
        nodes.append(NodePlan(node_rank, procs, train_gpus, vllm_gpus))
    world_size = sum(n.train_procs for n in nodes)
    device = "cuda" if gpus else "cpu"
    for node in nodes:
        serves = server and node.node_rank == serving_node
        node.env = _env(topo, node, serve_env(cfg, device) if serves else None)
        if vllm.mode == "colocate" and device == "cpu":  # the engine inside each training process
            node.env["train"].update(vllm_cpu_env(cfg))
        if dedicated and vllm.server_host:  # where the trainers reach it: a SLURM job learns it only from its hosts,
            node.env["train"][SERVER_HOST_ENV] = str(vllm.server_host)  # after config.yaml was frozen
        if node.train_procs:
            node.commands["train"] = train_command(topo, node, config_path, training_nodes=topo.nnodes - dedicated)
        if serves:
            node.commands["vllm"] = serve_command(cfg, max(1, len(node.vllm_gpus)), device)
    gpu_name, gpu_memory_gib, card_source = card(topo, list(cards), device)
    sync = weight_sync(vllm, device) if server else None
    return Plan(
        world_size=world_size,
        device=device,
        gpus_per_node=gpus,
        nodes=nodes,
        gpu_name=gpu_name,
        gpu_memory_gib=gpu_memory_gib,
        card_source=card_source,
        vllm={
            "mode": vllm.mode,
            "server_node": serving_node,
            "nodes": dedicated,
            "gpus": reserved,
            "tensor_parallel_size": vllm.tensor_parallel_size,
            "weight_sync": sync,
        },
        network=network.needs(cfg, topo.nnodes - dedicated, serving_node, sync),
    )


def weight_sync(vllm: DictConfig, device: str) -> str:
    """vllm.weight_sync with auto decided: TRL's NCCL engine on GPUs, files on CPU (NCCL needs CUDA)."""
    if vllm.weight_sync != "auto":
        return vllm.weight_sync
    return "nccl" if device == "cuda" else "filesystem"


# The serving node's address, as the training processes get it (training/build.py reads it where vllm.server_host is
# null in config.yaml: under launcher=slurm it is the job's last host, known only inside the job).
SERVER_HOST_ENV = "GRPO_EXP_VLLM_SERVER_HOST"

# vLLM's CPU build sizes its KV cache from this variable (GiB of host RAM), not from gpu_memory_utilization.
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"


def cpu_notes(cfg: DictConfig) -> list[str]:
    """What vLLM's CPU build needs beyond the argv and environment a GPU node gets, with the reason: the plan's notes.
    vllm_cpu_env() is the one place it is applied, for the server and the colocated engines alike."""
    return [
        f"{CPU_KV_CACHE_ENV}={cfg.vllm.cpu_kv_cache_gib}: vLLM's CPU build sizes its KV cache in GiB of host RAM "
        "(vllm.cpu_kv_cache_gib), not from gpu_memory_utilization",
    ]


def vllm_cpu_env(cfg: DictConfig) -> dict[str, str]:
    """The environment a vLLM engine on CPU needs (cpu_notes says why)."""
    return {CPU_KV_CACHE_ENV: str(cfg.vllm.cpu_kv_cache_gib)}


def serve_env(cfg: DictConfig, device: str) -> dict[str, str]:
    """The server's environment: TRL's dev mode, and on CPU what vLLM's CPU build needs."""
    return {**SERVER_ENV, **(vllm_cpu_env(cfg) if device == "cpu" else {})}


# `trl vllm-serve` (1.16) only runs vLLM's own server with this set: the weight-transfer and prefix-cache
# endpoints TRL's client uses live behind vLLM's dev mode (trl/scripts/vllm_serve.py, main).
SERVER_ENV = {
    "VLLM_SERVER_DEV_MODE": "1",
    # the engine's start-up INFO lines carry the figures a run reports (core/vllm_log.py); importing trl (the driver
    # does, to build this argv) sets VLLM_LOGGING_LEVEL=ERROR in its environment, which the server would inherit
    "VLLM_LOGGING_LEVEL": "INFO",
}
# vllm.* server flags TRL's serve script does not name: forwarded to `vllm serve` as its own options.
SERVER_EXTRA_FLAGS = {
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "kv_cache_memory_bytes": "--kv-cache-memory",
}


def served_model(cfg: DictConfig) -> str:
    """What the server loads: the model's hub id or directory; the tiny model's local directory (built by the driver
    before it starts the server, launching/launch.py)."""
    if cfg.model.name_or_path is not None:
        return cfg.model.name_or_path

    return str(tiny_model_path(cfg.model, env.tool_sets(cfg)))


# vllm.weight_sync=filesystem: the worker extension the server reloads the policy with (named, not imported here)
FILESYSTEM_SYNC_EXTENSION = "grpo_exp.training.vllm_worker.FilesystemSync"


def serve_arguments(cfg: DictConfig, gpus: int) -> dict:
    """TRL's ScriptArguments fields for a server on `gpus` GPUs: engines of vllm.tensor_parallel_size, data
    parallel over the rest, the vllm.* flags TRL's script takes."""
    v = cfg.vllm
    return {
        "model": served_model(cfg),
        "tensor_parallel_size": v.tensor_parallel_size,
        "data_parallel_size": max(1, gpus // v.tensor_parallel_size),
        "host": bind_address(cfg),
        "port": v.server_port,
        "gpu_memory_utilization": v.gpu_memory_utilization,
        "dtype": cfg.model.dtype,
        "max_model_len": v.max_model_length,
        "enable_prefix_caching": v.enable_prefix_caching,
        "enforce_eager": v.enforce_eager,
        "kv_cache_dtype": v.kv_cache_dtype,
        "vllm_model_impl": v.model_impl,
    }


def serve_command(cfg: DictConfig, gpus: int, device: str = "cuda") -> list[str]:
    """`vllm serve` exactly as TRL 1.16 starts it (trl.scripts.vllm_serve.build_command: TRL's weight transfer
    and logprobs flags, whatever the installed trl adds; read without importing trl, serve_argv.py), run with
    serve_env(); `trl vllm-serve` itself is deprecated and only execs this. vllm.weight_sync=filesystem adds the
    worker extension it reloads with. On CPU the argv is the same: what vLLM's CPU build needs is its environment
    (cpu_notes)."""

    v = cfg.vllm
    extra = [a for key, flag in SERVER_EXTRA_FLAGS.items() if v[key] is not None for a in (flag, str(v[key]))]
    if weight_sync(v, device) == "filesystem":  # the server's side of the sync (training/vllm_worker.py)
        extra += ["--worker-extension-cls", FILESYSTEM_SYNC_EXTENSION]
    return serve_argv.render(serve_arguments(cfg, gpus), extra)


def bind_address(cfg: DictConfig) -> str:
    """Where the server listens: TRL's server has no authentication, so only where trainers are.
    Loopback when they all run on its node; a dedicated serving node its own address (the one the
    trainers are given, vllm.server_host); else node 0's address on the cluster network."""
    if cfg.vllm.server_bind is not None:
        return cfg.vllm.server_bind
    if cfg.vllm.nodes:
        return cfg.vllm.server_host or "<vllm.server_host: the serving node's address>"
    return "127.0.0.1" if cfg.topology.nnodes == 1 else str(cfg.topology.master_addr)


def _env(topo: SimpleNamespace, node: NodePlan, serving: dict[str, str] | None) -> dict[str, dict[str, str]]:
    train = {
        "MASTER_ADDR": str(topo.master_addr),
        "MASTER_PORT": str(topo.master_port),
        "NODE_RANK": str(node.node_rank),
        "NNODES": str(topo.nnodes),
    }
    env = {"train": train}
    if node.train_gpus:
        train["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, node.train_gpus))
        # Fragmentation is the usual cause of "OOM with free memory"; expandable segments avoid it.
        train["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        train["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"  # a dead peer aborts collectives instead of hanging
        train["GRPO_EXP_VLLM_GPUS"] = ",".join(map(str, node.vllm_gpus))  # for the worker's startup guard
    if serving is not None:
        gpus = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, node.vllm_gpus))} if node.vllm_gpus else {}
        env["vllm"] = {**gpus, **serving}
    return env


def train_command(topo: SimpleNamespace, node: NodePlan, config_path: str, training_nodes: int) -> list[str]:
    if training_nodes == 1 and node.train_procs == 1:
        return [sys.executable, *WORKER, config_path]
    run = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={node.train_procs}"]
    if training_nodes == 1:
        # single node: rendezvous on a free local port, so concurrent runs never collide
        return [*run, "--standalone", *WORKER, config_path]
    return [
        *run,
        f"--nnodes={training_nodes}",  # a dedicated serving node is not part of the training world
        f"--node-rank={node.node_rank}",
        f"--master-addr={topo.master_addr}",
        f"--master-port={topo.master_port}",
        # a node that never arrives fails the rendezvous after this long, not NCCL's 30 minutes
        f"--rdzv-conf=timeout={topo.rendezvous_timeout_s}",
        *WORKER,
        config_path,
    ]


def describe(plan: Plan) -> str:
    """The plan as a short readable table (printed by action=plan, and before a launch). A run of
    nodes that differ only in their --node-rank is one line after its first node: a 512-node plan
    prints a few lines, not 512 commands (plan.json keeps every node)."""
    lines = [f"world size {plan.world_size} ({plan.device}), {len(plan.nodes)} node(s) x {plan.gpus_per_node} GPU(s)"]
    for _, run in itertools.groupby(plan.nodes, key=_shape):
        first, *rest = run
        lines += _node_lines(first)
        if len(rest) > 1:
            lines.append(
                f"  nodes {rest[0].node_rank}..{rest[-1].node_rank}: the same as node {first.node_rank}, "
                "each with its own --node-rank"
            )
        else:
            lines += [line for n in rest for line in _node_lines(n)]
    return "\n".join(lines + network.describe(plan.network))


def _node_lines(n: NodePlan) -> list[str]:
    gpus = f"GPUs {_span(n.train_gpus)}" if n.train_gpus else "CPU"
    where = f"GPUs {_span(n.vllm_gpus)}" if n.vllm_gpus else "CPU"  # a server without GPUs: vLLM's CPU build
    vllm = f", vLLM server on {where}" if "vllm" in n.commands else ""
    role = (
        f"serving only: vLLM on {where}"
        if not n.train_procs
        else f"{n.train_procs} training process(es) on {gpus}{vllm}"
    )
    lines = [f"  node {n.node_rank}: {role}"]
    shown = ("CUDA_VISIBLE_DEVICES", "VLLM_SERVER_DEV_MODE", CPU_KV_CACHE_ENV)  # what a user re-running a command sets
    for role, argv in n.commands.items():
        env = " ".join(f"{k}={v}" for k, v in n.env.get(role, {}).items() if k in shown)
        lines.append(f"    {role}: {env + ' ' if env else ''}{shlex.join(argv)}")
    return lines


def _shape(n: NodePlan) -> tuple:
    """What a node runs, its rank left out."""
    rank = f"--node-rank={n.node_rank}"
    commands = {role: [a for a in argv if a != rank] for role, argv in n.commands.items()}
    return n.train_procs, n.train_gpus, n.vllm_gpus, str(commands)


def _span(ids: list[int]) -> str:
    return ",".join(map(str, ids))
