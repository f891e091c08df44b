"""The TCP ports a run opens, chosen and checked before launch on the node that opens them.

- `topology.master_port`: torchrun's rendezvous on node 0 of a multi-node run (a single-node run
  uses `--standalone`, which picks its own free port).
- `vllm.server_port`, `vllm.group_port`: the vLLM server's HTTP API and its weight-sync group,
  on the server's node.

`auto` (the default for the vLLM ports) picks free ports in the driver before config.yaml is
frozen, so two single-node runs side by side need no flags; every process then reads the same
numbers. Every node of a multi-node run must agree on them, so there `auto` means TRL's defaults
(8000, 51216). A busy port is exit 2 naming the key, the port and a free alternative, instead of
a failure deep inside vLLM or torchrun.
"""

import socket

from omegaconf import DictConfig

from grpo_exp import Problem

AUTO = "auto"
# key -> multi-node default (TRL's)
VLLM_PORTS = {
    "vllm.server_port": 8000,
    "vllm.group_port": 51216,
    "vllm.agent_port": 51217,
}


def is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is usable
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def _value(cfg: DictConfig, key: str):
    group, name = key.split(".")
    return cfg[group][name]


def check_values(cfg: DictConfig) -> list[Problem]:
    """Each vLLM port is `auto` or a TCP port."""
    return [
        Problem(key, f"is {value!r}; it must be auto or a TCP port in [1, 65535]", f"set {key}=auto")
        for key in VLLM_PORTS
        if (value := _value(cfg, key)) != AUTO
        and not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535)
    ]


def resolve_auto(cfg: DictConfig, pick_free_here: bool = True) -> None:
    """Replace `auto` ports before the config is frozen: free ones of this machine on a single node, TRL's
    defaults where several nodes must agree or where this machine's free ports say nothing (`pick_free_here`
    False: the launcher's processes run on hosts of their own, Kubernetes' pods)."""
    here = cfg.topology.nnodes == 1 and pick_free_here
    for key, default in VLLM_PORTS.items():
        if _value(cfg, key) == AUTO:
            group, name = key.split(".")
            cfg[group][name] = free_port() if here else default


def check_busy(cfg: DictConfig, node_rank: int, server_node: int | None) -> list[Problem]:
    """Ports this node will open that something else already holds."""
    wanted = []
    if cfg.topology.nnodes > 1 and node_rank == 0:
        wanted.append("topology.master_port")
    if cfg.vllm.mode == "server" and server_node == node_rank:
        wanted += [k for k in VLLM_PORTS if _value(cfg, k) != AUTO]
    return [
        Problem(
            key,
            f"port {_value(cfg, key)} is already in use on this node (another run, or another service)",
            f"use a free port, e.g. {key}={free_port()}",
        )
        for key in wanted
        if not is_free(_value(cfg, key))
    ]
