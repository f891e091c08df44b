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
    cpu = placement.make_plan(cfg, "config.yaml", detected_gpus=0)  # a server on CPU: the same argv, its own env
    assert cpu.nodes[0].commands["vllm"][:6] == argv[:6] and cpu.nodes[0].vllm_gpus == []
    assert "--data-parallel-size 1" in " ".join(cpu.nodes[0].commands["vllm"])  # one engine beside the CPU ranks
    assert cpu.nodes[0].env["vllm"] == {**placement.SERVER_ENV, "VLLM_CPU_KVCACHE_SPACE": "1"}


def test_a_cpu_server_serves_the_tiny_models_directory():
    from grpo_exp.models.model_info import tiny_model_path

    cfg = compose_cfg("vllm=server", "vllm.cpu_kv_cache_gib=3")
    ports.resolve_auto(cfg)
    plan = placement.make_plan(cfg, "config.yaml", detected_gpus=0)
    argv = plan.nodes[0].commands["vllm"]
    assert argv[argv.index("serve") + 1] == str(tiny_model_path(cfg.model))
    assert plan.nodes[0].env["vllm"]["VLLM_CPU_KVCACHE_SPACE"] == "3" and plan.vllm["weight_sync"] == "filesystem"
    assert "VLLM_CPU_KVCACHE_SPACE=3" in placement.describe(plan)


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


def test_a_server_that_exits_while_training_runs_ends_the_run_with_its_last_lines(tmp_path):
    """launch._wait: the trainers would wait on a dead server until their timeouts; the driver ends the run."""
    from grpo_exp.launching import launch

    output = launch._Output(tmp_path / "train.log")
    server = launch._start([sys.executable, "-c", "print('Engine core initialization failed: out of memory')"], {})
    output.follow(server, prefix="[vllm] ")
    trainer = launch._start([sys.executable, "-c", "import time; time.sleep(60)"], {})
    try:
        with pytest.raises(vllm_server.ServerDied, match=r"exited with code 0 while training ran:\n  .*out of memory"):
            launch._wait(trainer, server, output)
    finally:
        launch.stop(trainer, grace_s=1)
        output.close()
    assert "[vllm] Engine core initialization failed" in (tmp_path / "train.log").read_text()


def test_the_servers_memory_is_its_whole_process_tree():
    """A server is an API process, an engine core and workers: their resident memory is added up."""
    child = "import time; b = bytearray(300 * 2**20); time.sleep(30)"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(30)",
        ],
        start_new_session=True,
    )
    try:
        memory = vllm_server.ServerMemory(parent.pid, interval_s=0.1)
        import time

        deadline = time.time() + 20
        while memory.peak_bytes < 300 * 2**20 and time.time() < deadline:
            time.sleep(0.2)
        assert memory.stop() >= 300 * 2**20  # the child's 300 MiB, counted under its parent
    finally:
        from grpo_exp.launching.launch import stop

        stop(parent, grace_s=1)
