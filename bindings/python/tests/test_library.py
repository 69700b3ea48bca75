"""The loaded library: info(), version, where it was found, and the search order."""

import os
import subprocess
import sys
import threading

import numpy as np

import streamattn


def test_info_describes_the_machine():
    info = streamattn.info()
    assert info["version"] == streamattn.version()
    assert info["version"].split(".")[0] == "0"
    assert info["backend"] in ("cpu", "cuda")
    assert info["num_threads"] >= 1
    assert info["simd_target"] in info["compiled_targets"].split()
    assert os.path.exists(info["library"]) or "libstreamattn" in info["library"]


def run_python(code, **env):
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True)


def test_streamattn_library_is_the_only_choice_when_set():
    r = run_python("import streamattn", STREAMATTN_LIBRARY="/nonexistent/libstreamattn.so")
    assert r.returncode != 0
    assert "STREAMATTN_LIBRARY" in r.stderr and "/nonexistent/libstreamattn.so" in r.stderr


def test_streamattn_library_is_honoured():
    path = os.path.realpath(streamattn.library_path)
    r = run_python("import streamattn; print(streamattn.library_path)", STREAMATTN_LIBRARY=path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == path


def test_one_context_per_python_thread():
    x = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)
    want = streamattn.softmax(x)
    results, contexts = [None] * 4, [None] * 4

    def work(i):
        contexts[i] = streamattn.default_context()
        results[i] = streamattn.softmax(x)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in contexts}) == 4
    for r in results:
        np.testing.assert_array_equal(r, want)


def test_the_package_needs_no_torch_and_streamattn_torch_needs_it():
    # torch made unimportable: the numpy API works; streamattn.torch is an ImportError.
    r = run_python("import sys; sys.modules['torch'] = None\n"
                   "import numpy as np, streamattn\n"
                   "print(streamattn.softmax(np.zeros(4, np.float32)))\n"
                   "assert not [m for m in sys.modules if m.startswith('torch') and\n"
                   "            sys.modules[m] is not None]\n"
                   "try:\n    import streamattn.torch\nexcept ImportError as e:\n"
                   "    print('ImportError', e)\n")
    assert r.returncode == 0, r.stderr
    assert "[0.25 0.25 0.25 0.25]" in r.stdout
    assert "ImportError" in r.stdout
