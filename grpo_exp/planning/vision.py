"""A vision-language model's vision tower in the plan: the tokens each image adds to a prompt and the activations its
patches keep for backward, per image and per generation (GRPO repeats a prompt's images for each of its completions,
so a batch of b completions runs b x images_per_prompt images through the tower). Qwen2-VL's and Qwen2.5-VL's
layout: patch_size-pixel patches, spatial_merge_size^2 of them merged into one token of the language model, the
image resized into [min_pixels, max_pixels] in multiples of patch_size x spatial_merge_size (their processors'
`smart_resize`). Pure Python.

Saved-for-backward bytes per patch, fitted to the exact saved-tensor bytes of a random-init Qwen2-VL vision tower on
CPU (training/saved_bytes.measure_vision; tests/planning/test_vision.py holds them within 10%), in elements of the
activation dtype: per block 11.5 x hidden (two LayerNorms' inputs and outputs, q, k, v with rotary, the attention
output and the residual) + 3 x intermediate (the MLP's input to its activation, the activation's output); outside
the blocks 4 x hidden (the merger) + the patch's pixels (3 x temporal_patch_size x patch_size^2, kept by the patch
embedding's backward). With activation checkpointing a block keeps its input (hidden) and one block is recomputed
at a time. A tower that does not train (LoRA on the language model) keeps nothing: its inputs need no gradient.
"""

import math

BLOCK_ELEMENTS = (11.5, 3.0)  # per patch per block: x hidden, x intermediate
MERGER_ELEMENTS = 4.0  # per patch, x hidden
CHANNELS = 3


def image_patches(vision, image_size) -> int:
    """Patches of one image after the processor's resize: `image_size` [h, w] in pixels, or None for the largest
    image the processor makes (max_pixels)."""
    unit = vision.patch_size * vision.spatial_merge_size
    if image_size is None:
        pixels = vision.max_pixels
        side = math.floor(math.sqrt(pixels) / unit) * unit
        return (side // vision.patch_size) ** 2
    height, width = (max(unit, round(d / unit) * unit) for d in image_size)
    pixels = height * width
    if pixels > vision.max_pixels:  # smart_resize: scale both sides down, floor to the unit
        scale = math.sqrt(height * width / vision.max_pixels)
        height, width = (max(unit, math.floor(d / scale / unit) * unit) for d in (height, width))
    elif pixels < vision.min_pixels:  # scale both sides up, ceil to the unit
        scale = math.sqrt(vision.min_pixels / (height * width))
        height, width = (math.ceil(d * scale / unit) * unit for d in (height, width))
    return (height // vision.patch_size) * (width // vision.patch_size)


def image_tokens(vision, image_size) -> int:
    """Tokens one image adds to the language model's sequence: its patches merged spatial_merge_size^2 at a time."""
    return image_patches(vision, image_size) // vision.spatial_merge_size**2


def activations(vision, patches: int, element_bytes: int, checkpointing: bool) -> float:
    """Bytes the tower keeps for backward over `patches` patches (every image of a micro-batch)."""
    c_h, c_f = BLOCK_ELEMENTS
    block = patches * (c_h * vision.hidden_size + c_f * vision.intermediate_size) * element_bytes
    outside = patches * (MERGER_ELEMENTS * vision.hidden_size + pixel_elements(vision)) * element_bytes
    if checkpointing:
        return vision.depth * patches * vision.hidden_size * element_bytes + block + outside
    return vision.depth * block + outside


def pixel_elements(vision) -> int:
    return CHANNELS * vision.temporal_patch_size * vision.patch_size**2
