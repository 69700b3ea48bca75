"""Shared fixtures. The optional test dependencies (torch, ml_dtypes, the MiniLM example's
packages) skip their tests when missing, unless STREAMATTN_TEST_REQUIRE_ALL=1 (scripts/test.sh
sets it), where a missing one fails: CI must not pass by skipping."""

import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
# The MiniLM example loads its model from an installed package; nothing may reach for the hub,
# whichever test imports transformers first.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def optional_import(name):
    if os.environ.get("STREAMATTN_TEST_REQUIRE_ALL") == "1":
        return __import__(name)
    return pytest.importorskip(name)


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(1234)
