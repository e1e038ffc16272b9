"""CPU tests of bench/define_probe.py (extra -D defines for kernel experiments)."""
import importlib

import pytest
from gpu_helpers import bench_script


def _probe():
    return bench_script("define_probe")


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


def _ab():
    return bench_script("define_ab")


def test_define_ab_arguments():
    ab = _ab()
    args = ab.parse_args(["--defines", "UNIFORM_CONSUMER=1", "--shapes", "4096x4096x4096,128x8192x8192",
                          "--dtype", "bfloat16,float16", "--block-shapes", "4096x7168x16384", "--rounds", "3"])
    assert args.defines == (("UNIFORM_CONSUMER", 1),) and args.rounds == 3 and args.iters == 20
    assert args.shapes == [(4096, 4096, 4096), (128, 8192, 8192)] and args.fp8_shapes == []
    assert args.block_shapes == [(4096, 7168, 16384)] and args.dtype == ["bfloat16", "float16"]
    assert args.epilogue is False and args.block_m is None
    args = ab.parse_args(["--defines", "SPLIT_SPREAD=0", "--epilogue", "--block-m", "192", "--shapes", "1536x1536x4096"])
    assert args.epilogue is True and args.block_m == 192
    for bad in (["--defines", "X=1"], ["--defines", "X", "--shapes", "64x64x64"],
                ["--defines", "X=1", "--shapes", "64x64x64", "--rounds", "0"],
                ["--defines", "X=1", "--shapes", "64x64x64", "--block-m", "256"]):
        with pytest.raises(SystemExit):
            ab.parse_args(bad)


def test_define_ab_summary():
    """b_vs_a is the median over rounds of A time / B time (> 1: B faster);
    ratios to cuBLAS are cuBLAS time / side time."""
    ab = _ab()
    times = {"cuBLAS": [1.0, 1.0, 1.0], "A": [1.0, 2.0, 1.0], "B": [0.5, 1.0, 1.25]}
    row = ab._summary({}, 2e12, times)
    assert row["b_vs_a"] == 2.0 and row["b_vs_a_range"] == [0.8, 2.0]
    assert row["a_tflops"] == 2.0 and row["b_tflops"] == 2.0
    assert row["a_vs_cublas"] == 1.0 and row["b_vs_cublas"] == 1.0
    assert "cublas_tflops" not in ab._summary({}, 1.0, {"A": [1.0], "B": [1.0]})
