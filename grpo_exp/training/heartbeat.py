"""Heartbeats between the nodes of a run: a node or link lost mid-step is a named failure within
`watchdog.heartbeat_s`, not a collective that waits out gloo's or NCCL's timeout (30 minutes by default), and a rank
that fails on one node ends every other node's ranks within a beat.

Every rank of a multi-node run opens its own client of torchrun's rendezvous store (on node 0, at
MASTER_ADDR:MASTER_PORT: the network the run already needs) and, from a thread, counts up its own beat and reads the
others' every heartbeat_s / 6:
- a rank whose store calls have not come back for heartbeat_s has lost node 0 (its link, or node 0 itself);
- a rank that sees another node's rank stop beating for heartbeat_s has lost that node;
- a rank that ends with an error posts it (`post_failure`): the others end within a beat, naming it, instead of
  waiting in their next collective (gloo notices a dead peer, not a silent one).
On any of these the beat's watcher writes every thread's Python stack to stacks/rank<N>.txt and hands the rank's end
to `on_lost`, which records it and ends the process: the main thread may be inside a collective that no Python code
can interrupt. Ranks on one node share its fate (torchrun ends them together), so only other nodes' ranks are
watched. `close()` when training returns: from then on ranks finish at their own pace and the store may go.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from grpo_exp.core import rundir
from grpo_exp.core.records import RankRecord, Status

log = logging.getLogger(__name__)

PREFIX = "grpo_exp/heartbeat/"  # beside torchrun's and the process group's keys in the same store


class Heartbeat:
    def __init__(
        self, run_dir: Path, rank: int, world_size: int, heartbeat_s: float, on_lost: Callable[[RankRecord], None]
    ):
        self.run_dir, self.rank, self.world_size, self.heartbeat_s = Path(run_dir), rank, world_size, heartbeat_s
        self.on_lost = on_lost
        self.node = int(os.environ.get("GROUP_RANK", "0"))  # torchrun's node rank
        self.host = socket.gethostname()
        self.store_at = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ.get('MASTER_PORT', '29500')}"
        self.interval = max(heartbeat_s / 6, 0.2)
        self.started = self.last_answer = time.monotonic()
        self.nodes: dict[int, tuple[int, str]] = {}  # rank -> (its node, its host), as the ranks posted them
        self.seen: dict[int, tuple[int, float]] = {}  # rank -> (its last beat, when it last moved)
        self.store = None
        self.done = threading.Event()
        threading.Thread(target=self._beat, name="grpo_exp-heartbeat", daemon=True).start()
        threading.Thread(target=self._watch, name="grpo_exp-heartbeat-watch", daemon=True).start()

    def close(self) -> None:
        self.done.set()

    def post_failure(self, error: str | None) -> None:
        """This rank failed: tell every other node's ranks (best effort: the store may be what failed)."""
        if self.store is None or self.done.is_set():
            return
        self.done.set()
        try:
            if self.store.add(PREFIX + "failed", 1) == 1:  # the first to fail is the cause; the rest follow it
                text = f"rank {self.rank} on node {self.node} ({self.host}) failed: {error}"
                self.store.set(PREFIX + "failure", text[:2000])
        except Exception:  # noqa: BLE001  the store being unreachable is one of the failures that gets here
            pass

    # The beat: one thread making store calls, which block while the link is down.

    def _beat(self) -> None:
        import torch.distributed as dist

        host, port = self.store_at.rsplit(":", 1)
        try:
            store = dist.TCPStore(
                host, int(port), is_master=False, timeout=timedelta(seconds=self.heartbeat_s), wait_for_workers=False
            )
            self.store = store  # post_failure's; this thread's calls use `store`
            store.set(f"{PREFIX}node/{self.rank}", f"{self.node} {self.host}")
        except Exception as exc:  # noqa: BLE001  the watcher names the store unreachable after heartbeat_s
            log.warning("heartbeat: cannot reach the rendezvous store at %s: %s", self.store_at, exc)
            return
        beats = 0
        while not self.done.is_set():
            try:
                beats = store.add(f"{PREFIX}beat/{self.rank}", 1)
                now = time.monotonic()
                for other in range(self.world_size):  # add 0: a read that never waits for a key
                    if other != self.rank:
                        self._saw(store, other, store.add(f"{PREFIX}beat/{other}", 0), now)
                if store.add(PREFIX + "failed", 0):
                    self._lost(Status.FAILED, "stopped: " + store.get(PREFIX + "failure").decode(), None)
                    return
                self.last_answer = now
            except Exception as exc:  # noqa: BLE001  a store call timed out or the connection broke
                log.warning("heartbeat %d: %s", beats, exc)
            self.done.wait(self.interval)

    def _saw(self, store, other: int, beat: int, now: float) -> None:
        if other not in self.nodes and store.check([f"{PREFIX}node/{other}"]):
            node, host = store.get(f"{PREFIX}node/{other}").decode().split(" ", 1)
            self.nodes[other] = (int(node), host)
        last = self.seen.get(other)
        if last is None or beat != last[0]:
            self.seen[other] = (beat, now)

    # The watcher: never blocks, so it sees the beat's calls stop coming back.

    def _watch(self) -> None:
        while not self.done.wait(1.0):
            now = time.monotonic()
            if now - self.last_answer > self.heartbeat_s:
                self._lost(
                    Status.NODE_LOST,
                    f"lost node 0: its rendezvous store at {self.store_at} has not answered for "
                    f"{now - self.last_answer:.0f} s (watchdog.heartbeat_s={self.heartbeat_s:g})",
                    0,
                )
                return
            for other, (node, host) in list(self.nodes.items()):
                since = now - self.seen.get(other, (0, self.started))[1]
                if node != self.node and since > self.heartbeat_s:
                    self._lost(
                        Status.NODE_LOST,
                        f"lost node {node} ({host}): its rank {other} has not beaten for {since:.0f} s "
                        f"(watchdog.heartbeat_s={self.heartbeat_s:g})",
                        node,
                    )
                    return

    def _lost(self, status: Status, why: str, lost_node: int | None) -> None:
        if self.done.is_set():
            return
        self.done.set()
        phase = rundir.read_phase(self.run_dir, self.rank) or "unknown"
        stacks = self.run_dir / rundir.STACKS / f"rank{self.rank}.txt"
        stacks.parent.mkdir(exist_ok=True)
        with open(stacks, "a") as file:  # every thread: the main one shows the collective it waits in
            faulthandler.dump_traceback(file, all_threads=True)
        record: RankRecord = {
            "status": status,
            "time": time.time(),
            "error": f"node {self.node} ({self.host}, rank {self.rank}) {why}, in phase {phase}; "
            f"Python stacks: {stacks}",
            "lost": {"node": self.node, "host": self.host, "rank": self.rank, "lost_node": lost_node, "phase": phase},
        }
        log.error("%s", record["error"])
        self.on_lost(record)
