"""CPU tests of bench/define_probe.py (extra -D defines for kernel experiments)."""
import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _probe():
    spec = importlib.util.spec_from_file_location("define_probe", ROOT / "bench" / "define_probe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parse_defines():
    p = _probe()
    assert p.parse_defines("BS_SB_AHEAD=1, BS_SB_AHEAD2=0") == (("BS_SB_AHEAD", 1), ("BS_SB_AHEAD2", 0))
    assert p.parse_defines("") == ()
    for bad in ("BS_SB_AHEAD", "1X=2", "A=b", "A=1.5"):
        with pytest.raises(ValueError, match="bad define"):
            p.parse_defines(bad)


def test_extra_defines_patch_block_scaled_specs_and_restore():
    from rawcoop.gemm_configs import E4M3, GemmConfig
    p = _probe()
    G = importlib.import_module("rawcoop.gemm")
    block, plain = GemmConfig(128, E4M3, scale_mode=1), GemmConfig(128, E4M3)
    before_block, before_plain = block.spec, plain.spec
    G._PLANS["sentinel"] = object()
    with p.extra_defines((("BS_SB_AHEAD", 1),), block_scaled_only=True):
        assert "sentinel" not in G._PLANS                      # plans hold kernels: emptied
        assert ("BS_SB_AHEAD", 1) in block.spec.defines
        assert plain.spec == before_plain
    assert block.spec == before_block and plain.spec == before_plain
    with p.extra_defines((("BS_SB_AHEAD", 0),)):
        assert ("BS_SB_AHEAD", 0) in plain.spec.defines
    assert plain.spec == before_plain


def test_extra_defines_refuse_configuration_defines():
    p = _probe()
    with pytest.raises(ValueError, match="BLOCK_N"):
        with p.extra_defines((("BLOCK_N", 64),)):
            pass


def test_main_splits_its_arguments_from_the_bench_ones(monkeypatch):
    p = _probe()
    import rawcoop.bench as B
    seen = {}

    def fake_main(argv, prog):
        from rawcoop.gemm_configs import E4M3, GemmConfig
        seen["argv"], seen["prog"] = argv, prog
        seen["defines"] = GemmConfig(128, E4M3, scale_mode=1).spec.defines
        return 0
    monkeypatch.setattr(B, "main", fake_main)
    assert p.main(["--defines", "BS_SB_AHEAD=1", "--block-scaled-only", "--", "--suite", "fp8", "--fp8-block"]) == 0
    assert seen["argv"] == ["--suite", "fp8", "--fp8-block"]
    assert ("BS_SB_AHEAD", 1) in seen["defines"]
