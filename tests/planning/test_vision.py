"""A vision-language model's vision tower planned: the tokens each image adds to a prompt (from the processor's
config), and the activations of every image of every generation, checkpointed or not, held to the exact bytes a
random-init Qwen2-VL vision tower saves for backward on CPU."""

import json

import pytest

from grpo_exp.planning import vision
from grpo_exp.training import saved_bytes
from tests.helpers import planned
from tests.planning.test_quantized_vision import qwen2_vl  # noqa: F401  (the Qwen2-VL-2B config.json fixture)

SMALL = {
    "depth": 2,
    "hidden_size": 64,
    "intermediate_size": 256,
    "num_heads": 2,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
}


class Tower:
    def __init__(self, **numbers):
        self.__dict__.update({"min_pixels": 3136, "max_pixels": 12845056, **SMALL, **numbers})


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("shape", [SMALL, {**SMALL, "hidden_size": 128, "intermediate_size": 256, "depth": 3}])
def test_the_towers_activations_are_the_bytes_it_saves(shape, checkpointing, dtype):
    images, grid = 2, (8, 12)
    measured = saved_bytes.measure_vision(shape, images, grid, dtype, checkpointing)
    planned_bytes = vision.activations(
        Tower(**shape), images * grid[0] * grid[1], 2 if dtype == "bfloat16" else 4, checkpointing
    )
    assert planned_bytes == pytest.approx(measured, rel=0.10)


def test_an_images_tokens_follow_the_processors_resize():
    tower = Tower()
    assert vision.image_patches(tower, [448, 448]) == 32 * 32 and vision.image_tokens(tower, [448, 448]) == 256
    assert vision.image_tokens(tower, [450, 640]) == (448 // 28) * (644 // 28)  # rounded to 28-pixel units
    small = Tower(max_pixels=200704)  # 256 tokens at most
    assert vision.image_tokens(small, [2000, 2000]) <= 256 and vision.image_tokens(small, None) == 256
    assert vision.image_tokens(Tower(min_pixels=200704), [28, 28]) >= 256  # scaled up to min_pixels


@pytest.fixture
def vl_model(qwen2_vl):  # noqa: F811
    (qwen2_vl / "preprocessor_config.json").write_text(json.dumps({"min_pixels": 3136, "max_pixels": 1003520}))
    return ("model=auto", f"model.name_or_path={qwen2_vl}", "model.dtype=bfloat16", "topology=1x1", "vllm=off")


def test_model_info_reads_the_tower_and_the_processors_pixels(vl_model):
    tower = planned(*vl_model).cfg.model.vision
    assert (tower.depth, tower.hidden_size, tower.intermediate_size, tower.spatial_merge_size) == (32, 1280, 5120, 2)
    assert tower.max_pixels == 1003520


def test_images_lengthen_the_prompt_and_a_trained_tower_keeps_their_activations(vl_model):
    text = planned(*vl_model, "trainer.activation_checkpointing=false")
    two = planned(
        *vl_model, "trainer.activation_checkpointing=false", "data.images_per_prompt=2", "data.image_size=[448,448]"
    )
    assert two.inputs.prompt == text.inputs.prompt + 2 * 256
    assert text.memory.train["components_gib"]["vision_activations"] == 0
    b = two.inputs.batch
    expected = vision.activations(two.inputs.vision, b * 2 * 1024, 2, checkpointing=False)
    assert two.memory.train["components_gib"]["vision_activations"] == pytest.approx(expected / 2**30)
    assert expected / 2**30 > 10  # 8 completions x 2 images of 1024 patches through 32 blocks: the seeds' 10-20 GiB
    ckpt = planned(*vl_model, "data.images_per_prompt=2", "data.image_size=[448,448]")
    assert ckpt.memory.train["components_gib"]["vision_activations"] < expected / 2**30 / 5
    lora = planned(*vl_model, "peft=lora", "data.images_per_prompt=2", "data.image_size=[448,448]")
    assert lora.memory.train["components_gib"]["vision_activations"] == 0  # a frozen tower saves nothing
