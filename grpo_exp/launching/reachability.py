"""Before a node of a multi-node run starts anything: can it reach what the plan says it connects to
(planning/network.py)? Seconds, and the node, address and port named, instead of a rendezvous that waits out
topology.rendezvous_timeout_s without a word (names that did not resolve once kept two nodes silent for 400 s).

- Node 0 hosts the rendezvous at topology.master_addr: that address must be one of its own.
- Every other training node must resolve topology.master_addr and reach its port. A refused connection is a
  reachable host where nothing listens yet (node 0 may start later), so it passes; a timeout or an unreachable
  host or network does not.
- Node 0 of a run with a dedicated serving node reaches vllm.server_host the same way (the server may start later).
"""

import errno
import socket
import time

from omegaconf import DictConfig

from grpo_exp import Problem

CONNECT_TIMEOUT_S = 5.0  # a connect that neither succeeds nor is refused within this long is a link that is not there


def check(cfg: DictConfig, node_rank: int, serving_node: int | None) -> list[Problem]:
    """What this node (`node_rank`) cannot reach of what it needs; [] on a single node."""
    topo = cfg.topology
    if topo.nnodes < 2:
        return []
    here = f"node {node_rank} ({socket.gethostname()})"
    problems = []
    trains = serving_node is None or not cfg.vllm.nodes or node_rank != serving_node
    if trains and node_rank == 0:
        problems += _own_address("topology.master_addr", str(topo.master_addr), here)
    elif trains:
        problems += _reach("topology.master_addr", str(topo.master_addr), topo.master_port, here, "node 0's rendezvous")
    if node_rank == 0 and cfg.vllm.mode == "server" and cfg.vllm.nodes and cfg.vllm.server_host:
        where = f"the vLLM server on node {serving_node}"
        problems += _reach("vllm.server_host", str(cfg.vllm.server_host), cfg.vllm.server_port, here, where)
    return problems


def resolve(host: str) -> list[str]:
    """`host`'s addresses (IPv4 and IPv6), sorted: the one place this module asks the resolver (socket.gaierror
    where it cannot)."""
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})


def _stream_socket(address: str) -> socket.socket:
    return socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)


def _addresses(key: str, host: str, here: str) -> tuple[list[str], list[Problem]]:
    try:
        return resolve(host), []
    except socket.gaierror as exc:
        return [], [
            Problem(
                key,
                f"{host!r} does not resolve on {here}: {exc.strerror}",
                f"set {key} to an address, or a name every node resolves (DNS, /etc/hosts)",
            )
        ]


def _own_address(key: str, host: str, here: str) -> list[Problem]:
    """Node 0 listens at `host`: it must be an address of this machine."""
    addresses, problems = _addresses(key, host, here)
    for address in addresses:
        with _stream_socket(address) as probe:
            try:
                probe.bind((address, 0))
                return []
            except OSError:
                continue
    if problems:
        return problems
    return [
        Problem(
            key,
            f"{host} ({', '.join(addresses)}) is not an address of {here}, which hosts the rendezvous: the other nodes "
            "would wait at an address where nothing listens",
            f"set {key} to this node's address on the network the nodes share ({_own()})",
        )
    ]


def _reach(key: str, host: str, port: int, here: str, what: str) -> list[Problem]:
    addresses, problems = _addresses(key, host, here)
    if problems:
        return problems
    failures = []
    for address in addresses:
        started = time.monotonic()
        reason = _connect(address, port)
        if reason is None:
            return []
        failures.append(f"{address}:{port} {reason} after {time.monotonic() - started:.1f} s")
    return [
        Problem(
            key,
            f"{here} cannot reach {what} at {host}:{port} ({'; '.join(failures)})",
            f"check {key} is that node's address on a network both nodes share, and that nothing between them blocks "
            f"port {port} (`nc -zv {host} {port}` on this node tries it)",
        )
    ]


def _connect(address: str, port: int) -> str | None:
    """None where the host answers (a connection, or refused: nothing listens yet); else why not."""
    with _stream_socket(address) as probe:
        probe.settimeout(CONNECT_TIMEOUT_S)
        try:
            probe.connect((address, port))
            return None
        except ConnectionRefusedError:
            return None
        except TimeoutError:
            return "timed out"
        except OSError as exc:
            if exc.errno == errno.ECONNREFUSED:
                return None
            return exc.strerror or str(exc)


def _own() -> str:
    """This machine's non-loopback addresses, as a hint."""
    try:
        mine = [a for a in resolve(socket.gethostname()) if not a.startswith(("127.", "::1"))]
    except socket.gaierror:
        return "see `ip addr`"
    return ", ".join(mine) if mine else "see `ip addr`"
