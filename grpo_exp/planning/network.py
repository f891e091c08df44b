"""What a multi-node run needs of the network: each connection it opens between nodes, from which nodes to which
node, at which address and port, for what. plan.json's `network`, printed under the plan's nodes; the reachability
check before launch (launching/reachability.py) tries the ones a node can try alone.

A single-node run needs nothing of the network: everything it opens is on this machine. On several nodes:
- every training node but node 0 connects to node 0 at topology.master_addr:master_port: torchrun's rendezvous and
  its store, through which the process group's ranks find each other and the heartbeats run (training/heartbeat.py);
- every training node connects to every other one on ports the OS picks (gloo's and NCCL's own listeners): a
  firewall between nodes must leave them open;
- with a dedicated serving node (vllm.nodes=1), rank 0's node connects to it at vllm.server_host: the HTTP API
  (server_port), its agent (agent_port: config check and stop), and the NCCL weight sync (group_port); the
  filesystem sync needs a directory both nodes mount instead.
"""

from omegaconf import DictConfig


def needs(cfg: DictConfig, training_nodes: int, serving_node: int | None, sync: str | None) -> list[dict]:
    """The connections between nodes: [{from, to, address, port, for}]; address and port null for ports the OS picks,
    port null for a shared directory (its path the address). `sync`:
    the server's weight sync (nccl | filesystem), decided."""
    if cfg.topology.nnodes < 2:
        return []
    others = "node 1" if training_nodes == 2 else f"nodes 1..{training_nodes - 1}"
    out = []
    if training_nodes > 1:
        rendezvous = {"from": others, "to": "node 0", "address": str(cfg.topology.master_addr)}
        out += [
            {**rendezvous, "port": cfg.topology.master_port, "for": "torchrun's rendezvous and store (heartbeats)"},
            {
                "from": "every training node",
                "to": "every other one",
                "address": None,
                "port": None,
                "for": "the process group's connections (gloo, NCCL)",
            },
        ]
    if sync is not None and serving_node is not None and cfg.vllm.nodes:
        host = cfg.vllm.server_host or f"<node {serving_node}'s address>"  # (a SLURM job's: its last host)
        server = {"from": "node 0", "to": f"node {serving_node}", "address": str(host)}
        out += [
            {**server, "port": cfg.vllm.server_port, "for": "the vLLM server's HTTP API"},
            {**server, "port": cfg.vllm.agent_port, "for": "the serving node's agent (config check, stop)"},
        ]
        if sync == "filesystem":
            where = cfg.vllm.weight_sync_dir or "<run dir>/weight_sync"
            out.append({**server, "address": where, "port": None, "for": "weight sync: a directory both nodes mount"})
        else:
            out.append({**server, "port": cfg.vllm.group_port, "for": "weight sync (NCCL)"})
    return out


def describe(network: list[dict]) -> list[str]:
    """The plan's network lines, under its nodes."""
    if not network:
        return []
    lines = ["  network (open these between nodes):"]
    for need in network:
        where = need["address"] or "ports the OS picks"
        if need["port"] is not None:
            where = f"{need['address']}:{need['port']}"
        lines.append(f"    {need['from']} -> {need['to']}: {need['for']} ({where})")
    return lines
