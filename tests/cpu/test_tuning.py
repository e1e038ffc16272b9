"""CPU: the tuned-configuration table (signature, persistence, validation)
and the candidate list rawcoop.tune times."""
import json
from types import SimpleNamespace

import pytest

from rawcoop import tuning
from rawcoop.plan import configs


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


def test_candidates_cover_tiles_groups_splits_and_swap():
    plan = SimpleNamespace(m=16, n=8192, k=8192, swap_ok=True)
    cands = configs.tuning_candidates(plan)
    assert cands[0] == dict(block_n=None, group=None, swap=None, splits=None, pingpong=None, streamk=None,
                            block_m=None)
    assert {c["pingpong"] for c in cands[1:] if c["block_n"] == 128} == {True, False}
    assert not any(c["pingpong"] for c in cands[1:] if c["block_n"] != 128)
    assert {c["block_n"] for c in cands[1:] if c["swap"]} == {64}
    assert {c["block_n"] for c in cands[1:] if not c["swap"]} == {64, 128, 192, 256, *configs.NARROW_BOX_NS}
    # (one tile row: 128x64 too; the widths between the multiples of 64: group 8, un-swapped)
    narrow = [c for c in cands if c["block_n"] in configs.NARROW_BOX_NS]
    assert len(narrow) == 3 * len(configs.NARROW_BOX_NS)
    assert all(c["group"] == 8 and c["swap"] is False and not c["pingpong"] for c in narrow)
    assert {c["splits"] for c in cands[1:]} == {None, 1, 2, 4}
    assert {c["group"] for c in cands[1:]} == {4, 8, 16}
    assert len(cands) == len({tuple(sorted(c.items())) for c in cands})
    sk = [c for c in cands[1:] if c["streamk"]]             # stream-K: cooperative tiles, no forced splits
    assert {(c["block_n"], c["swap"]) for c in sk} == {(64, True), (64, False), (128, False), (192, False),
                                                       (256, False)} | {(w, False) for w in configs.NARROW_BOX_NS}
    assert all(c["splits"] is None and c["pingpong"] is False for c in sk)
    assert all(tuning._valid(c) for c in cands)
    few_k = configs.tuning_candidates(SimpleNamespace(m=4096, n=4096, k=64, swap_ok=False))
    assert all(c["splits"] in (None, 1) for c in few_k) and all(c["swap"] in (None, False) for c in few_k)
    assert {c["block_n"] for c in few_k[1:] if c["block_m"] is None} == {128, 192, 256, *configs.NARROW_BOX_NS}
    # (many tile rows: no 128x64)
    tall = [c for c in few_k if c["block_m"] == 192]        # 192-row tiles for 16-bit M > 128, un-swapped
    assert {c["block_n"] for c in tall} == {128, 192} and {c["splits"] for c in tall} == {None, 1}
    assert all(c["swap"] is False and c["pingpong"] is False and c["streamk"] is None for c in tall)
    assert not any(c["block_m"] for c in cands)             # M = 16: none
    assert all(tuning._valid(c) for c in few_k)
    tf32 = configs.tuning_candidates(SimpleNamespace(m=4096, n=4096, k=4096, swap_ok=False,
                                                          cfg=configs.GemmConfig(256, configs.TF32)))
    assert not any(c["block_n"] == 192 and c["block_m"] is None for c in tf32)     # 128x192: 16-bit only
    assert not any(c["block_n"] in configs.NARROW_BOX_NS for c in tf32)       # the narrow widths too
    nmajor = configs.tuning_candidates(SimpleNamespace(m=4096, n=4096, k=4096, swap_ok=False,
                                                            cfg=configs.GemmConfig(256, configs.BF16,
                                                                                        True, False)))
    assert not any(c["block_n"] in configs.NARROW_BOX_NS for c in nmajor)    # N-major b: no narrow kernel
    swapped = configs.tuning_candidates(SimpleNamespace(m=4096, n=4096, k=4096, swap_ok=False, cfg=configs
                                                             .GemmConfig(256, configs.BF16, True, False,
                                                                         d_colmajor=True)))
    assert any(c["block_n"] == 176 for c in swapped)      # swapped plan: the kernel's A is the user's K-major b


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
