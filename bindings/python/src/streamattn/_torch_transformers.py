"""streamattn as an attention implementation of Hugging Face transformers.

register_transformers() adds it to transformers' AttentionInterface under a name, with SDPA's
mask function (boolean masks of padding, sliding windows and the like, or none where
`is_causal` says it all), so that any model that dispatches through the interface runs its
attention here after `from_pretrained(..., attn_implementation="streamattn")`. The function
follows transformers' own SDPA integration call for call, and does natively what that one
cannot: grouped-query attention without repeating k and v, logit softcapping (Gemma 2), and
attention sinks (`s_aux`, gpt-oss).
"""

import torch


def transformers_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                           is_causal=None, position_bias=None, softcap=None, s_aux=None,
                           **kwargs):
    """An attention function for transformers' AttentionInterface: query [batch, heads_q,
    seq_q, dim], key and value [batch, heads_kv, seq_k, dim] -> ([batch, seq_q, heads_q, dim]
    contiguous, None). attention_mask: what SDPA's mask function made (boolean, True takes
    part, or additive float), or None; then the layer is causal (top-left, as SDPA) when the
    module says so and seq_q > 1. position_bias (T5-style, additive) joins the mask."""
    from .torch import torch_layout_attention
    if dropout:
        raise ValueError("streamattn attention: dropout=%r (the model is in training mode?); "
                         "streamattn computes attention for inference" % (dropout,))
    if kwargs.get("output_attentions"):
        raise ValueError("streamattn attention never forms the attention weights "
                         "(output_attentions=True needs attn_implementation='eager')")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    causal = query.shape[2] > 1 and attention_mask is None and is_causal
    mask = attention_mask
    if position_bias is not None:
        if mask is None:
            mask = position_bias
        elif mask.dtype == torch.bool:  # torch.where broadcasts both (batch 1 biases)
            mask = torch.where(mask, position_bias, -torch.inf)
        else:
            mask = mask + position_bias
    sinks = None if s_aux is None else s_aux.detach().float()
    out = torch_layout_attention(query, key, value, mask, causal, scaling, softcap=softcap,
                                 sinks=sinks, out_heads_first=False)
    return out, None


def register_transformers(name="streamattn"):
    """Registers transformers_attention with transformers' AttentionInterface (and SDPA's mask
    function with its AttentionMaskInterface) as `name`; returns the name. Load a model with
    attn_implementation=name, or set one loaded with model.set_attn_implementation(name)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register(name, transformers_attention)
    # Without a mask function of its own, transformers would hand this implementation no mask
    # at all (as it does vLLM's); SDPA's is the one whose masks this function reads.
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)
    return name
