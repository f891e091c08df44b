"""The vLLM server: its argv as TRL's own parser reads it, and the health wait."""

import http.server
import subprocess
import sys
import threading

import pytest

from grpo_exp.launching import ports, vllm_server
from tests.helpers import compose_cfg


def test_vllm_serve_argv_parses_with_trls_own_parser():
    from trl.scripts.vllm_serve import make_parser

    cfg = compose_cfg(
        "model=qwen7b", "vllm=server", "vllm.gpus=4", "vllm.tensor_parallel_size=2", "vllm.max_model_length=4096"
    )
    ports.resolve_auto(cfg)  # the driver does this before anything names the ports
    argv = vllm_server.serve_command(cfg, gpus=cfg.vllm.gpus)
    args, extra = make_parser().parse_args_and_config(
        args=argv[argv.index("vllm-serve") + 1 :], return_remaining_strings=True
    )
    assert extra == []
    assert (args.model, args.tensor_parallel_size, args.data_parallel_size) == ("Qwen/Qwen2.5-7B-Instruct", 2, 2)
    assert (args.gpu_memory_utilization, args.max_model_len, args.dtype, args.port) == (
        0.9,
        4096,
        "bfloat16",
        cfg.vllm.server_port,
    )
    assert args.host == "127.0.0.1"  # one node: loopback only (TRL's server has no authentication)


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
