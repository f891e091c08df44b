"""The command line wins over an experiment, whole: a group option given again on the command line keeps its own
values over the experiment's, and every key given beside it (of that group or any other) keeps the command line's,
in any order. Composed in-process exactly as the CLI composes (Hydra's compose, then __main__.held_options), over
every group and every experiment shipped, and over a user's config dir holding an imported recipe."""

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from grpo_exp import recipe
from grpo_exp.__main__ import _option_file, deepspeed_override, held_options
from grpo_exp.config import overrides
from tests.helpers import CONF, REPO

# For each group: an option, and one of its keys set beside it to a value no option or experiment ships.
# A group added to conf/ without a row here fails test_every_group_has_a_case.
BESIDE = {
    "data": ("gsm8k", "data.max_prompt_length", 333),
    "deepspeed": ("zero2", "deepspeed.zero_optimization.reduce_bucket_size", 123456),
    "env": ("calculator", "env.working_dir", "/tmp/held-by-the-command-line"),
    "fsdp": ("full_shard", "fsdp.reshard_after_forward", False),
    "launcher": ("slurm", "launcher.slurm.time_min", 17),
    "logger": ("wandb", "logger.project", "held-project"),
    "model": ("auto", "model.name_or_path", "/models/held-local-copy"),
    "peft": ("lora", "peft.r", 48),
    "topology": ("1x8", "topology.gpus_per_node", 12),
    "trainer": ("grpo", "trainer.learning_rate", 3.5e-6),
    "vllm": ("colocate", "vllm.gpu_memory_utilization", 0.45),
}
NOT_OPTIONS = ("experiment", "sweep")  # an experiment is what the command line wins over; a sweep is no run

# A recipe as `grpo-exp recipe` imports it (its model is model=auto at a hub path the user plans against a local copy
# of), with an accelerate config that chose a topology and set its keys.
RECIPE = """\
model_name_or_path: /models/Qwen3-0.6B
torch_dtype: bfloat16
dataset_name: openai/gsm8k
per_device_train_batch_size: 2
num_generations: 11
gradient_accumulation_steps: 8
max_completion_length: 256
use_vllm: true
vllm_mode: server
"""
ACCELERATE = "distributed_type: MULTI_GPU\nnum_machines: 1\nnum_processes: 5\nmixed_precision: bf16\n"
QWEN3_CONFIG_JSON = (
    '{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, '
    '"num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, '
    '"vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": true, "torch_dtype": "bfloat16"}'
)


@pytest.fixture(scope="module")
def users_conf(tmp_path_factory) -> Path:
    """A user's config dir with an imported recipe (conf/experiment/imported.yaml) and a local model directory."""
    where = tmp_path_factory.mktemp("users_conf")
    (where / "recipe.yaml").write_text(RECIPE)
    (where / "accelerate.yaml").write_text(ACCELERATE)
    (where / "local-model").mkdir()
    (where / "local-model" / "config.json").write_text(QWEN3_CONFIG_JSON)
    out = where / "conf" / "experiment" / "imported.yaml"
    args = [where / "recipe.yaml", "--accelerate", where / "accelerate.yaml", "--out", out]
    assert recipe.main([str(a) for a in args]) in (0, None)  # what `grpo-exp recipe` runs
    return where


def composed_as_the_cli(*items: str, conf_dir: Path | None = None):
    """(config, notes) as `python -m grpo_exp [--config-dir conf_dir] <items>` composes them: Hydra's compose, then
    the command line held over the experiment (__main__.held_options, what the driver's task does)."""
    items = [deepspeed_override(i) for i in items]
    search = [f"hydra.searchpath=[file://{conf_dir}]"] if conf_dir else []
    if not GlobalHydra.instance().is_initialized():
        initialize_config_dir(str(CONF), version_base="1.3")
    cfg = compose("config", overrides=[*items, *search], return_hydra_config=True)
    hydra_cfg = cfg.hydra
    OmegaConf.set_struct(cfg, False)
    experiment = _option_file(hydra_cfg, "experiment", hydra_cfg.runtime.choices.get("experiment"))
    notes = held_options(cfg, hydra_cfg, experiment)
    return cfg, notes


def experiments() -> list[str]:
    return sorted(p.stem for p in (CONF / "experiment").glob("*.yaml") if not p.stem.startswith("_test_"))


def test_every_group_has_a_case():
    assert set(BESIDE) == set(overrides.GROUPS) - set(NOT_OPTIONS)


@pytest.mark.slow  # an exhaustive matrix: 2 composes per case; the two cases below are its fast representatives
@pytest.mark.parametrize("experiment", [*experiments(), "imported"])
@pytest.mark.parametrize("group", sorted(BESIDE))
def test_a_group_option_given_again_holds_the_key_set_beside_it(group, experiment, users_conf):
    option, key, value = BESIDE[group]
    conf_dir = users_conf / "conf" if experiment == "imported" else None
    for order in ([f"{group}={option}", f"{key}={value}"], [f"{key}={value}", f"{group}={option}"]):
        cfg, _ = composed_as_the_cli(f"experiment={experiment}", *order, conf_dir=conf_dir)
        assert cfg.hydra.runtime.choices[group] == option, order
        assert OmegaConf.select(cfg, key) == value, (order, OmegaConf.select(cfg, key))


def test_the_imported_recipes_model_is_planned_against_a_local_copy(users_conf):
    """The docs' first use of an import: its hub model planned against a local directory, model=auto given again."""
    local = str(users_conf / "local-model")
    cfg, notes = composed_as_the_cli(
        "experiment=imported", "model=auto", f"model.name_or_path={local}", conf_dir=users_conf / "conf"
    )
    assert cfg.model.name_or_path == local
    assert not OmegaConf.is_missing(cfg.model, "name_or_path")
    (note,) = notes  # one line names what the experiment set and the command line replaced
    assert note.startswith("the command line holds over experiment imported:")
    assert f"model.name_or_path={local} (experiment: /models/Qwen3-0.6B)" in note


def test_a_chosen_option_keeps_its_values_over_the_experiment_and_the_keys_given_beside_it_win_over_both(users_conf):
    """The accelerate config chose topology=1x8 with 6 GPUs (5 trainers + a served engine). topology=1x8 again resets
    the option's own 8; topology.gpus_per_node=12 beside it wins over both, and vllm.gpus=1 leaves 11 trainers."""
    conf_dir = users_conf / "conf"
    imported = OmegaConf.load(conf_dir / "experiment" / "imported.yaml")
    assert imported.topology.gpus_per_node == 6
    cfg, notes = composed_as_the_cli("experiment=imported", "topology=1x8", conf_dir=conf_dir)
    assert cfg.topology.gpus_per_node == 8
    assert "topology.gpus_per_node=8 from topology=1x8 (experiment: 6)" in notes[0]
    cfg, notes = composed_as_the_cli(
        "experiment=imported", "topology.gpus_per_node=12", "vllm.gpus=1", "topology=1x8", conf_dir=conf_dir
    )
    assert (cfg.topology.gpus_per_node, cfg.vllm.gpus) == (12, 1)
    assert "topology.gpus_per_node=12 (experiment: 6)" in notes[0]


def test_nothing_is_held_over_when_the_command_line_changes_nothing_the_experiment_set():
    _, notes = composed_as_the_cli("experiment=open_r1_demo", "trainer.beta=0.02")
    assert notes == []
    cfg, notes = composed_as_the_cli("experiment=open_r1_demo")
    assert notes == [] and cfg.trainer.num_generations == 8


@pytest.mark.slow  # the real CLI in a subprocess
def test_the_command_line_held_over_an_imported_experiment_is_planned(users_conf, tmp_path):
    """As a user types it: --config-dir, the experiment, model=auto and a local model beside it, action=plan."""
    local = users_conf / "local-model"
    result = subprocess.run(
        [sys.executable, "-m", "grpo_exp", "--config-dir", str(users_conf / "conf"), "experiment=imported",
         "model=auto", f"model.name_or_path={local}", "topology=1x8", "topology.gpus_per_node=12", "vllm.gpus=1",
         "topology.gpu_memory_gib=80", "action=plan", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    plan = OmegaConf.load(tmp_path / "run" / "plan.json")
    assert plan.world_size == 11
    held = [n for n in plan.notes if n.startswith("the command line holds over experiment imported")]
    assert len(held) == 1 and "topology.gpus_per_node=12 (experiment: 6)" in held[0], plan.notes
    assert "the command line holds over experiment imported" in result.stdout
