"""A dedicated serving node (vllm.nodes=1): its driver runs the vLLM server on all its GPUs and a
small agent beside it, and the training nodes talk to that agent.

The serving node is outside the training process group, so the fingerprint check that stops
mismatched training nodes (config/fingerprint.py) cannot reach it. Instead, before training starts, node
0's driver fetches the serving node's config fingerprint from the agent (GET /fingerprint): a
serving node started with another model, TP size or any other key stops both with exit 5 naming
the keys, not a hang or a silent mix. When the run ends, however it ends, node 0's driver tells
the agent (POST /stop) and the serving node stops its server and exits with the run's status.

The agent listens where the vLLM server does (placement.bind_address) on vllm.agent_port.
"""

import json
import logging
import threading
import time

from omegaconf import DictConfig

from grpo_exp.config import fingerprint
from grpo_exp.core import outcome
from grpo_exp.core.outcome import Mismatch
from grpo_exp.core.records import RankRecord, Status
from grpo_exp.launching.vllm_server import bind_address

log = logging.getLogger(__name__)


def _fingerprint(cfg: DictConfig) -> dict:
    return {"node_rank": int(cfg.topology.node_rank), "config": fingerprint.fingerprint(cfg)["config"]}


class Agent:
    """GET /fingerprint, POST /stop {status, error}: the serving node's side."""

    def __init__(self, cfg: DictConfig):
        # http.server and urllib.request are imported where used: they bring http.client, email and ssl (~30 ms
        # of every start-up), and only a serving node's driver and node 0's at run time use them
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.fingerprint = _fingerprint(cfg)
        self.stopped = threading.Event()
        self.outcome: RankRecord = {}  # {status, error} as node 0 reported the run's end
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps(agent.fingerprint).encode()
                self.send_response(200 if self.path == "/fingerprint" else 404)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                if self.path != "/stop":
                    self.send_response(404)
                    self.end_headers()
                    return
                reported = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                agent.outcome = agent.outcome or reported  # the first report of the end stands
                self.send_response(200)
                self.end_headers()
                agent.stopped.set()

            def log_message(self, *args):  # keep train.log for the run
                pass

        self.server = ThreadingHTTPServer((bind_address(cfg), int(cfg.vllm.agent_port)), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_until_stopped(cfg: DictConfig, server, run_dir) -> int:
    """Keep the vLLM server up until node 0 reports the run's end (or the server dies); record
    that end in this node's summary.json and return its exit code."""
    agent = Agent(cfg)
    log.info("serving node ready: vLLM and its agent on %s (agent port %s)", bind_address(cfg), cfg.vllm.agent_port)
    try:
        while not agent.stopped.wait(timeout=1.0):
            if server.poll() is not None:
                outcome.launch_failed(run_dir, f"the vLLM server exited with code {server.returncode}; see train.log")
                return outcome.EXIT_FAILED
    finally:
        agent.close()
    return outcome.ended_on_node0(run_dir, agent.outcome)


def _agent_url(cfg: DictConfig, path: str) -> str:
    return f"http://{cfg.vllm.server_host}:{cfg.vllm.agent_port}{path}"


def check_fingerprint(cfg: DictConfig) -> None:
    """Node 0, before training: raise Mismatch (and stop the serving node) if the
    serving node runs another config."""
    import urllib.request  # where used: see Agent

    deadline = time.time() + cfg.vllm.server_timeout
    while True:
        try:
            with urllib.request.urlopen(_agent_url(cfg, "/fingerprint"), timeout=5) as response:
                theirs = json.loads(response.read())
            break
        except OSError:
            if time.time() > deadline:
                raise Mismatch(
                    f"the serving node's agent did not answer {_agent_url(cfg, '/fingerprint')} within "
                    "vllm.server_timeout"
                ) from None
            time.sleep(1.0)
    problems = fingerprint.differences([_fingerprint(cfg), theirs], sections=("config",))
    if problems:
        message = "the serving node runs another config; start every node with the same command:\n  " + "\n  ".join(
            problems
        )
        send_stop(cfg, Status.MISMATCH, message)
        raise Mismatch(message)


def send_stop(cfg: DictConfig, status: str, error: str | None = None) -> None:
    """Node 0, at the end of the run: tell the serving node how it ended (best effort)."""
    import urllib.request  # where used: see Agent

    request = urllib.request.Request(
        _agent_url(cfg, "/stop"), data=json.dumps({"status": status, "error": error}).encode(), method="POST"
    )
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except OSError as exc:
        log.warning("could not tell the serving node that the run ended (%s); stop it by hand", exc)
