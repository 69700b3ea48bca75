"""streamattn as a transformers attention implementation (register_transformers) on small
randomly initialised decoders, against the same models with eager attention: a left-padded
batch and two decoding steps with the cache, through grouped-query attention, sliding windows,
softcapping (Gemma 2) and attention sinks (gpt-oss); T5's position bias with padding and
cross-attention. all-MiniLM-L6-v2, a real encoder with
padding, is tested with its example (test_examples.py)."""

import copy

import pytest

from conftest import optional_import

torch = optional_import("torch")
transformers = optional_import("transformers")
import streamattn.torch as sat  # noqa: E402  (needs torch)

COMMON = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=5,
              max_position_embeddings=64, initializer_range=0.3)  # scores of order 1
MODELS = {
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(attn_logit_softcapping=0.5, query_pre_attn_scalar=16)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(num_local_experts=2, num_experts_per_tok=1, intermediate_size=64,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
}


@pytest.fixture(scope="module")
def counted():
    """register_transformers() under a name of its own, wrapped to count its calls."""
    name = sat.register_transformers("streamattn-counted")
    calls = []

    def counting(*args, **kwargs):
        calls.append(kwargs)
        return sat.transformers_attention(*args, **kwargs)

    transformers.AttentionInterface.register(name, counting)
    return name, calls


def run(model, implementation, ids, mask, steps):
    """Logits of a padded prompt, then of each decoding step with the cache."""
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True)
        logits, cache = [out.logits], out.past_key_values
        for step in steps:
            mask = torch.cat([mask, torch.ones_like(step)], 1)
            out = model(input_ids=step, attention_mask=mask, cache=cache, use_cache=True)
            logits.append(out.logits)
            cache = out.past_key_values
    return logits


@pytest.mark.parametrize("name", sorted(MODELS))
def test_decoder_matches_eager_attention(name, counted):
    implementation, calls = counted
    config_name, model_name, extra = MODELS[name]
    config = getattr(transformers, config_name)(**dict(COMMON, **extra))
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, :4] = 0  # left padding, as generation pads
    mask[2, :7] = 0
    steps = [torch.randint(0, config.vocab_size, (3, n), generator=g) for n in (1, 2)]
    want = run(model, "eager", ids, mask, steps)
    del calls[:]
    got = run(model, implementation, ids, mask, steps)
    assert len(calls) == config.num_hidden_layers * (1 + len(steps))
    if name == "gemma2":
        assert all(c.get("softcap") == 0.5 for c in calls)
    if name == "gpt_oss":
        assert all(c.get("s_aux") is not None for c in calls)
    valid = mask.bool()  # padded positions' outputs are never used (and eager's are arbitrary)
    pairs = [(got[0][valid], want[0][valid])] + list(zip(got[1:], want[1:]))
    for g_logits, w_logits in pairs:  # float32 sums in another order: relative to the logits
        scale = w_logits.abs().max().item()
        assert scale > 1  # large enough that the tolerance below is not loose
        torch.testing.assert_close(g_logits, w_logits, rtol=0, atol=1e-5 * scale)


def test_t5_position_bias_and_cross_attention_match_eager(counted):
    implementation, calls = counted
    config = transformers.T5Config(vocab_size=97, d_model=64, d_kv=16, d_ff=96, num_layers=2,
                                   num_heads=4, initializer_factor=3.0)
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(config).eval()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 97, (2, 11), generator=g)
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 6:] = 0  # right padding of the encoder's input
    decoder_ids = torch.randint(0, 97, (2, 5), generator=g)
    logits = {}
    for name in ("eager", implementation):
        model.set_attn_implementation(name)
        del calls[:]
        with torch.no_grad():
            logits[name] = model(input_ids=ids, attention_mask=mask,
                                 decoder_input_ids=decoder_ids).logits
    # Encoder self-attention, decoder self- and cross-attention in each of the 2 layers.
    assert len(calls) == 3 * config.num_layers
    assert all(c.get("position_bias") is not None for c in calls)
    # Against the same model in float64 (eager): initializer_factor 3 makes scores of a few
    # hundred, so float32 attention's rounding, eager's as much as ours, is amplified through the
    # layers; each of our calls was checked within 2e-6 of float64 attention on its inputs, and
    # the logits must stay as close to the float64 model as eager's float32 logits are (measured
    # 2.4x eager's error with transformers 5.25, whose eager alone then already differed from
    # ours by 2.3x the 1e-5 of max |logits| this test used to allow).
    exact = copy.deepcopy(model).double()
    exact.set_attn_implementation("eager")
    with torch.no_grad():
        want = exact(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    scale = want.abs().max().item()
    eager_error = (logits["eager"].double() - want).abs().max().item()
    error = (logits[implementation].double() - want).abs().max().item()
    assert error <= max(4 * eager_error, 2e-5 * scale), (error, eager_error, scale)


def test_refuses_training_dropout():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="dropout"):
        sat.transformers_attention(torch.nn.Module(), q, q, q, None, dropout=0.1)
