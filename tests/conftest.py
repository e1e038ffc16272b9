import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
for path in (ROOT, TESTS):              # rawcoop and bench from the repository; the tests' helpers package
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def _hopper_present() -> bool:
    try:
        from rawcoop import device
        return device.has_hopper()
    except Exception:
        return False


HOPPER = _hopper_present()

# torch (interop and fp8 tests compare against it) is imported once, first,
# on a GPU machine.  Seen on the H200 (torch 2.11, CuPy 14): `import torch`
# raised RuntimeError from its operator-schema parser ("expected ident but
# found ')'", annotate(str tag)) when first imported late in a pytest run,
# after tests/gpu/test_fp8_block.py; alone, or imported early, it works.  Not
# rawcoop's doing as far as we could tell (a plain process that runs rawcoop
# GEMMs and then imports torch works); tests that need torch skip with the
# error (helpers.torch_or_skip) if it still fails.
if HOPPER:
    from bench.baselines import import_torch
    import_torch()                      # (torch, None) or (None, why): torch_or_skip asks again and says why


def pytest_collection_modifyitems(config, items):
    if HOPPER:
        return
    skip = pytest.mark.skip(reason="no NVIDIA Hopper (sm_90) GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test gets a cache directory shared by the whole test run (never ~/.cache)."""
    if "RAWCOOP_TEST_KEEP_CACHE" not in os.environ:
        d = tmp_path_factory.getbasetemp() / "rawcoop-cache"
        monkeypatch.setenv("RAWCOOP_CACHE_DIR", str(d))
    yield
