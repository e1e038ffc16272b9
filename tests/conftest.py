import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _hopper_present() -> bool:
    try:
        from rawcoop import device
        return device.has_hopper()
    except Exception:
        return False


HOPPER = _hopper_present()


def pytest_collection_modifyitems(config, items):
    if HOPPER:
        return
    skip = pytest.mark.skip(reason="no NVIDIA Hopper (sm_90) GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test gets a cache directory of the session (never ~/.cache)."""
    if "RAWCOOP_TEST_KEEP_CACHE" not in os.environ:
        d = tmp_path_factory.getbasetemp() / "rawcoop-cache"
        monkeypatch.setenv("RAWCOOP_CACHE_DIR", str(d))
    yield
