"""The vLLM server: started as TRL starts it (trl's own build_command), and the health wait."""

import http.server
import subprocess
import sys
import threading

import pytest

from grpo_exp.launching import ports, vllm_server
from grpo_exp.planning import placement
from tests.helpers import compose_cfg


def test_the_server_is_started_as_trl_starts_it():
    """`vllm serve` from trl's own build_command, its arguments as TRL's own parser reads `trl vllm-serve`'s,
    the flags TRL's script does not name forwarded as vLLM's, and vLLM's dev mode in its environment."""
    from trl.scripts.vllm_serve import build_command, make_parser

    cfg = compose_cfg(
        "model=qwen7b",
        "vllm=server",
        "vllm.gpus=4",
        "vllm.tensor_parallel_size=2",
        "vllm.max_model_length=4096",
        "vllm.enforce_eager=true",
        "vllm.kv_cache_dtype=fp8",
        "vllm.max_num_seqs=64",
        "vllm.kv_cache_memory_bytes=1000000000",
    )
    ports.resolve_auto(cfg)  # the driver does this before anything names the ports
    argv = vllm_server.serve_command(cfg, gpus=cfg.vllm.gpus)
    as_trl = [
        "--model=Qwen/Qwen2.5-7B-Instruct",
        "--tensor_parallel_size=2",
        "--data_parallel_size=2",
        "--host=127.0.0.1",  # one node: loopback only (the server has no authentication)
        f"--port={cfg.vllm.server_port}",
        "--gpu_memory_utilization=0.9",
        "--dtype=bfloat16",
        "--max_model_len=4096",
        "--enforce_eager=true",
        "--kv_cache_dtype=fp8",
    ]
    args, extra = make_parser().parse_args_and_config(args=as_trl, return_remaining_strings=True)
    assert extra == []
    vllm_flags = ["--max-num-seqs", "64", "--kv-cache-memory", "1000000000"]
    assert argv == build_command(args, vllm_flags)
    assert argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"] and "--weight-transfer-config" in argv
    plan = placement.make_plan(cfg, "config.yaml", detected_gpus=8)
    assert plan.nodes[0].commands["vllm"] == argv
    assert plan.nodes[0].env["vllm"]["VLLM_SERVER_DEV_MODE"] == "1"
    standin = compose_cfg("model=qwen7b", "vllm=server", "vllm.standin='python fake.py'")
    ports.resolve_auto(standin)
    assert vllm_server.serve_command(standin, gpus=1)[:4] == ["python", "fake.py", "serve", "Qwen/Qwen2.5-7B-Instruct"]


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_health_wait_returns_when_the_server_answers():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        waited = vllm_server.wait_healthy(f"http://127.0.0.1:{server.server_port}/health", timeout_s=10, poll_s=0.1)
        assert waited < 5
    finally:
        server.shutdown()


def test_health_wait_times_out_with_a_clear_error():
    with pytest.raises(
        vllm_server.ServerNotReady, match=r"did not answer http://127.0.0.1:9/health within vllm.server_timeout=1s"
    ):
        vllm_server.wait_healthy("http://127.0.0.1:9/health", timeout_s=1, poll_s=0.2)


def test_health_wait_notices_a_dead_server():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(vllm_server.ServerNotReady, match="exited before answering"):
        vllm_server.wait_healthy("http://127.0.0.1:9/health", timeout_s=30, is_alive=lambda: dead.poll() is None)
