"""What DeepSpeed and FSDP2 hold on a training GPU beside the model states (memory.py adds them to the phases that
hold them), in bytes. Pure functions of `Inputs`."""

from grpo_exp.planning.inputs import Inputs


def layer_params(x: Inputs) -> int:
    """Weights of one decoder layer: q and o, k and v, the MLP's gate, up and down projections."""
    return 2 * x.hidden * x.q_dim + 2 * x.hidden * x.kv_dim + 3 * x.hidden * x.intermediate


def deepspeed_buffers(x: Inputs, wb: int) -> float:
    """What DeepSpeed holds besides the model states during backward: ZeRO-1/2's gradient reduce
    bucket (overlap_comm keeps a second one in flight), ZeRO-3's parameters gathered on the fly -
    the module running, the prefetch bucket, at most stage3_max_live_parameters - and its bucket."""
    if x.zero_stage in (1, 2):
        return x.reduce_bucket * wb * (2 if x.overlap_comm else 1)
    if x.zero_stage == 3 and not x.offload_params:
        largest = max(layer_params(x), x.vocab * x.hidden)  # a decoder layer or the embedding / LM head
        live = min(x.zero3_max_live, largest + x.zero3_prefetch)
        return live * wb + x.reduce_bucket * wb
    return 0.0


def fsdp_buffers(x: Inputs) -> float:
    """What FSDP2 gathers on the fly: the root unit (embedding, LM head unless tied, final norm: fully_shard of the
    whole model, not resharded between forward and backward), the running decoder layer and the one prefetched
    (all of them from forward to backward with reshard_after_forward=false), at the compute dtype; and one
    layer's unsharded gradients before their reduce-scatter."""
    if not x.fsdp:
        return 0.0
    root = x.vocab * x.hidden * (1 if x.tied else 2)
    layers = 2 if x.fsdp_reshard else x.layers
    trainable_share = 1.0 if not x.lora_params else x.lora_params / x.params
    return (root + layers * layer_params(x)) * x.activation_bytes + trainable_share * layer_params(x) * (
        4 if x.lora_params else x.dtype_bytes
    )


def fsdp_full_tensor(x: Inputs) -> float:
    """TRL's DTensor `full_tensor()` calls under FSDP2: the LM head's weight for the chunked log-probs
    (trl/trainer/utils.py), and, syncing to vLLM, one parameter at a time (vllm_generation.py), the largest
    the embedding; merged LoRA weights move the same way, never the whole model (unlike ZeRO-3)."""
    return x.vocab * x.hidden * x.dtype_bytes if x.fsdp else 0.0
