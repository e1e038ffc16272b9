"""CPU: the tuned-configuration table (signature, persistence, validation)
and the candidate list rawcoop.tune times."""
import json
from types import SimpleNamespace

import pytest

from rawcoop import tuning
from helpers.plan import gc as configs


@pytest.fixture
def table_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAWCOOP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RAWCOOP_LOCK_DIR", str(tmp_path / "locks"))
    tuning.reset()
    yield tmp_path / "cache"
    tuning.reset()


def test_signature_separates_problems():
    base = dict(gpu="NVIDIA H200", in_name="bfloat16", out_name="bfloat16", m=128, n=8192, k=8192, batch=1,
                a_kmajor=True, b_kmajor=True, has_c=False, bias=0, act=0)
    s0 = tuning.signature(**base)
    for field, value in [("gpu", "NVIDIA H100"), ("in_name", "float16"), ("out_name", "float32"), ("m", 129),
                         ("n", 8191), ("k", 8200), ("batch", 2), ("a_kmajor", False), ("b_kmajor", False),
                         ("has_c", True), ("bias", 1), ("act", 2)]:
        assert tuning.signature(**dict(base, **{field: value})) != s0, field


def test_persist_merge_and_reload(table_dir):
    tuning._persist("sig-a", {"block_n": 256, "group": 8, "swap": False, "splits": 2, "us": 10.0})
    # another process wrote another entry meanwhile: both survive
    data = json.loads((table_dir / "tuned-v1.json").read_text())
    data["sig-b"] = {"block_n": 128, "group": 4, "swap": None, "splits": None, "us": 5.0}
    (table_dir / "tuned-v1.json").write_text(json.dumps(data))
    tuning._persist("sig-c", {"block_n": 64, "group": 16, "swap": True, "splits": 4, "us": 1.0})
    tuning.reset()
    assert tuning.lookup("sig-a")["splits"] == 2
    assert tuning.lookup("sig-b")["group"] == 4
    assert tuning.lookup("sig-c")["swap"] is True
    assert tuning.lookup("missing") is None
    assert oct((table_dir / "tuned-v1.json").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("bad", [{"block_n": 999, "group": 8, "swap": None, "splits": None},
                                 {"block_n": 128, "group": "8", "swap": None, "splits": None},
                                 {"block_n": 128, "group": 8, "swap": "yes", "splits": None},
                                 {"block_n": 128, "group": 8, "swap": None, "splits": 0},
                                 {"block_n": 128, "group": 8, "swap": None, "splits": None, "streamk": "yes"},
                                 {"block_n": 128, "group": 8, "swap": None, "splits": 2, "streamk": True},
                                 {"block_n": 128, "group": 8, "swap": None, "splits": None, "pingpong": True,
                                  "streamk": True},
                                 ["not", "a", "dict"]])
def test_invalid_entries_are_ignored(table_dir, bad):
    table_dir.mkdir(parents=True)
    (table_dir / "tuned-v1.json").write_text(json.dumps({"sig": bad}))
    assert tuning.lookup("sig") is None


def test_garbled_table_is_empty(table_dir):
    table_dir.mkdir(parents=True)
    (table_dir / "tuned-v1.json").write_text("{not json")
    assert tuning.lookup("anything") is None


def test_stored_tall_choices_are_checked():
    """A stored 192-row winner names a tall kernel that exists (128 or 192
    wide, cooperative, no stream-K); entries from before it have no block_m."""
    base = dict(block_n=None, group=8, swap=False, splits=None, pingpong=None, streamk=None)
    assert tuning._valid(base) and tuning._valid(dict(base, block_m=128))
    assert tuning._valid(dict(base, block_n=192, block_m=192)) and tuning._valid(dict(base, block_n=128, block_m=192))
    assert tuning._valid(dict(base, block_n=192)) and tuning._valid(dict(base, block_n=192, streamk=True))  # 128x192
    for bad in (dict(block_n=256, block_m=192), dict(block_n=64, block_m=192), dict(block_n=192, pingpong=True),
                dict(block_n=128, block_m=192, pingpong=True), dict(block_n=128, block_m=192, streamk=True),
                dict(block_m=256), dict(block_m="192")):
        assert not tuning._valid(dict(base, **bad)), bad


def test_stored_narrow_choices_are_checked():
    """A stored winner between the multiples of 64 is valid with or without stream-K, never
    ping-pong; other widths stay refused."""
    base = dict(group=8, swap=False, splits=None, pingpong=False, streamk=None, block_m=None)
    for bn in configs.NARROW_BOX_NS:
        assert tuning._valid(dict(base, block_n=bn)) and tuning._valid(dict(base, block_n=bn, streamk=True))
        assert not tuning._valid(dict(base, block_n=bn, pingpong=True))
        assert not tuning._valid(dict(base, block_n=bn, block_m=192))
    assert not tuning._valid(dict(base, block_n=100)) and not tuning._valid(dict(base, block_n=272))
