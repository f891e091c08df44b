"""The heartbeat between nodes (training/heartbeat.py) on a real TCPStore, in one process: two ranks "on two nodes"
beat through it; one that stops beating is lost within heartbeat_s, one that fails stops the other within a beat.
The same thing across a real link, cut, killed and slowed: tests/launching/test_two_nodes.py."""

import time

import pytest

from grpo_exp.core.records import Status
from grpo_exp.launching.ports import free_port
from grpo_exp.training.heartbeat import Heartbeat

BEAT_S = 1.5  # (a busy CI machine may hold a thread back for most of a second)


@pytest.fixture
def ranks(tmp_path, monkeypatch):
    """ranks(n) -> ([Heartbeat of rank r on node r], {rank: the end it handed over}), on one store."""
    import torch.distributed as dist

    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # torchrun's, on node 0
    ended: dict[int, dict] = {}
    made = []

    def make(n: int):
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port))
        for rank in range(n):
            monkeypatch.setenv("GROUP_RANK", str(rank))  # read when a heartbeat is made
            made.append(Heartbeat(tmp_path, rank, n, BEAT_S, lambda end, r=rank: ended.setdefault(r, end)))
        return made, ended

    yield make
    for beat in made:
        beat.close()
    del store


def _until(condition, timeout: float) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"nothing within {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.slow  # waits out real heartbeats (2-3 s): make test
def test_ranks_that_beat_are_never_lost(ranks):
    beats, ended = ranks(2)
    time.sleep(2 * BEAT_S)
    assert ended == {} and all(b.nodes for b in beats)  # each knows the other's node and host


@pytest.mark.slow  # waits out real heartbeats (2-3 s): make test
def test_a_rank_that_stops_beating_is_a_lost_node_within_the_heartbeat(ranks, tmp_path):
    beats, ended = ranks(2)
    _until(lambda: beats[0].nodes and beats[1].nodes, 5)
    beats[1].close()  # node 1 silent: its link cut, its machine gone
    waited = _until(lambda: 0 in ended, BEAT_S + 3)
    end = ended[0]
    assert end["status"] == Status.NODE_LOST and waited < BEAT_S + 2
    assert end["lost"]["lost_node"] == 1 and end["lost"]["node"] == 0 and end["lost"]["phase"] == "unknown"
    assert "lost node 1" in end["error"] and "watchdog.heartbeat_s=1.5" in end["error"]
    stacks = (tmp_path / "stacks" / "rank0.txt").read_text()
    assert "most recent call first" in stacks and "heartbeat.py" in stacks  # every thread, this one included


@pytest.mark.slow  # waits out real heartbeats (2-3 s): make test
def test_a_failed_rank_stops_the_other_node_within_a_beat(ranks):
    beats, ended = ranks(2)
    _until(lambda: beats[0].nodes and beats[1].nodes, 5)
    beats[1].post_failure("RuntimeError: boom [/x/pair.cc:152]")
    waited = _until(lambda: 0 in ended, BEAT_S + 2)
    end = ended[0]
    assert end["status"] == Status.FAILED and end["lost"]["lost_node"] is None and waited < BEAT_S
    assert "stopped: rank 1 on node 1" in end["error"] and "failed: RuntimeError: boom [/x/pair.cc:152]" in end["error"]


def test_the_first_failure_is_the_one_the_others_are_told(ranks):
    beats, ended = ranks(3)
    _until(lambda: all(len(b.nodes) == 2 for b in beats), 5)
    beats[2].post_failure("the cause")
    beats[1].post_failure("a consequence")
    _until(lambda: 0 in ended, BEAT_S + 2)
    assert "rank 2 on node 2" in ended[0]["error"] and "the cause" in ended[0]["error"]


def test_the_rank_is_recorded_once_when_the_heartbeat_and_the_main_thread_end_it_at_once(tmp_path, monkeypatch):
    """The heartbeat's watcher (a node lost) and the main thread (training failed) end rank 1 in the same instant:
    one writes ranks/rank1.json, whole; the other waits for it and writes nothing over it."""
    import threading
    import time

    from grpo_exp.core import rundir
    from grpo_exp.training import rank_process

    writes, active, overlapped = [], [0], []

    def slow_write(run_dir, rank, record, measurements=None):
        active[0] += 1
        overlapped.append(active[0] > 1)
        time.sleep(0.05)  # long enough for the other thread to arrive while this one writes
        writes.append(record["status"])
        active[0] -= 1

    monkeypatch.setattr(rundir, "write_rank_record", slow_write)

    class Closes:
        def close(self):
            pass

    state = rank_process.Rank(
        cfg=None,
        run_dir=tmp_path,
        rank=1,
        world_size=2,
        started=time.time(),
        checkpoint=None,
        tracker=None,  # rank 1 has no tracker to finish
        watchdog=Closes(),
        callback=None,
        phases=None,
    )
    results = {}
    start = threading.Barrier(2)

    def end(name, status):
        start.wait()
        results[name] = rank_process.record(state, {"status": status, "error": name})

    threads = [threading.Thread(target=end, args=(n, s)) for n, s in (("main", "failed"), ("heartbeat", "node_lost"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(writes) == 1 and not any(overlapped), writes
    assert sorted(results.values()) == [False, True]
