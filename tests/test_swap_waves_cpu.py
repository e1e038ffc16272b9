"""CPU: swap-AB for large 16-bit problems whose tile grid over N x M
quantises into fewer waves than the one over M x N
(gemm_configs.swap_for_waves_fits, SWAP_WAVES_RATIO; bench/NOTES.md stop 22).
The rule's scope, its choice on the shapes it was measured on, the fuzzer's
oracle agreeing with rawcoop.gemm's plan, and the warm-up set covering the
kernels it picks."""
import random

import pytest

from rawcoop import gemm_configs as gc


def _auto(m, n, k, kind=gc.BF16, kmajor=(True, True), **kw):
    args = dict(kinds=(kind, kind), kmajor=kmajor, out_name="bfloat16", use_c=False, c_rowmajor=True,
                bias_kind=0, activation=None, block=False)
    args.update(kw)
    return gc.plan_config(m, n, k, 1, 132, **args)


def _without_rule(m, n, k, **kw):
    """The rules' choice as it was before swap_for_waves (SWAP_WAVES_RATIO 0: never shorter enough)."""
    saved, gc.SWAP_WAVES_RATIO = gc.SWAP_WAVES_RATIO, 0.0
    try:
        return _auto(m, n, k, **kw)
    finally:
        gc.SWAP_WAVES_RATIO = saved


def _ratio(m, n, k, **kw):
    """The model's swapped / chosen schedule length for the choice without the rule."""
    old = _without_rule(m, n, k, **kw)
    return gc.config_cost(_auto(m, n, k, swap=True, **kw), m, n, k, 132) / gc.config_cost(old, m, n, k, 132)


# (M, N, K): swapped on the H200 (stop 22 calls 5-6) and the model's ratio
SWAPPED = [(7040, 896, 8192), (2880, 1408, 2048), (5696, 1344, 3072), (5056, 4928, 8192), (2048, 6208, 8192),
           (6912, 2368, 8192), (4864, 3392, 8192)]
# measured slower or even swapped (ratio 0.92 - 0.923), or no shorter in the model
KEPT = [(4992, 5760, 4096), (4864, 1600, 3072), (2048, 6272, 3072), (4096, 4096, 4096), (8192, 8192, 8192),
        (5376, 3200, 2048)]


@pytest.mark.parametrize("m,n,k", SWAPPED)
@pytest.mark.parametrize("kind", [gc.BF16, gc.FP16])
def test_swaps_where_the_swapped_grid_is_shorter(m, n, k, kind):
    cfg = _auto(m, n, k, kind)
    assert cfg.d_colmajor and cfg.block_m == 128 and cfg.block_n in (128, 256), cfg.spec.label
    assert cfg == _auto(m, n, k, kind, swap=True)            # exactly the forced swap-AB configuration
    assert _ratio(m, n, k, kind=kind) <= gc.SWAP_WAVES_RATIO


@pytest.mark.parametrize("m,n,k", KEPT)
def test_keeps_the_orientation_elsewhere(m, n, k):
    assert not _auto(m, n, k).d_colmajor


def test_rule_scope():
    """Only fp16/bf16, one batch, M and N >= TALL_MIN_M, a swap-AB kernel
    buildable (not fp32 out, not block-scaled), nothing forced."""
    m, n, k = 7040, 896, 8192
    assert _auto(m, n, k, kmajor=(False, False)).d_colmajor      # any layout (16-bit MN-major operands)
    assert not _auto(m, n, k, out_name="float32").d_colmajor
    for kind in (gc.TF32, gc.E4M3):
        cfg = _auto(m, n, k, kind)
        assert not cfg.d_colmajor, cfg.spec.label
    assert not _auto(m, n, k, block_n=256).d_colmajor               # anything forced: the rules' choice stands
    assert not _auto(m, n, k, splits=2).d_colmajor
    assert not gc.plan_config(m, n, k, 2, 132, kinds=(gc.BF16, gc.BF16), kmajor=(True, True), out_name="bfloat16",
                              use_c=False, c_rowmajor=True, bias_kind=0, activation=None, block=False).d_colmajor
    cfg = _auto(m, n, k)
    assert gc.swap_for_waves_fits(_without_rule(m, n, k), m, n, 1, kinds=(gc.BF16, gc.BF16), out_fp32=False,
                                  block=False)
    assert not gc.swap_for_waves_fits(cfg, m, n, 1, kinds=(gc.BF16, gc.BF16), out_fp32=False, block=False)
    assert not gc.swap_for_waves_fits(_without_rule(300, 8192, k), 300, 8192, 1, kinds=(gc.BF16, gc.BF16),
                                      out_fp32=False, block=False)


def test_epilogue_follows_the_swap():
    """With C and a bias the swapped kernel reads C column-major (a row-major
    C is D^T's column-major one) and adds the bias along its rows."""
    cfg = _auto(7040, 896, 8192, use_c=True, bias_kind=1, activation="gelu")
    assert cfg.d_colmajor and cfg.has_c and cfg.c_colmajor and cfg.bias_on_rows


def test_rare_on_random_shapes():
    """The rule picks few shapes (30 of 4000 random ones when it was added),
    and every pick is the model's: ratio <= SWAP_WAVES_RATIO."""
    rng = random.Random(99)
    picked = 0
    for _ in range(600):
        m, n = rng.randrange(384, 16385, 64), rng.randrange(384, 16385, 64)
        k = rng.choice([1024, 2048, 4096, 8192, 16384])
        cfg = _auto(m, n, k)
        old = _without_rule(m, n, k)
        if cfg.d_colmajor and not old.d_colmajor:
            picked += 1
            assert _ratio(m, n, k) <= gc.SWAP_WAVES_RATIO, (m, n, k)
    assert 0 < picked < 60


def test_warmup_set_has_the_swapped_tiles():
    """Every layout's swapped 128x256 and 128x128 kernels are in all_configs
    (warm-up compiles them), both 16-bit types."""
    have = {(c.block_n, c.in_kind, c.a_kmajor, c.b_kmajor) for c in gc.all_configs()
            if c.d_colmajor and c.block_m == 128 and c.cluster_size == 1 and not c.pingpong}
    for bn in (128, 256):
        for kind in (gc.BF16, gc.FP16):
            for ak in (True, False):
                for bk in (True, False):
                    assert (bn, kind, ak, bk) in have
    for m, n, k in SWAPPED:
        for kmajor in ((True, True), (False, True), (True, False), (False, False)):
            cfg = _auto(m, n, k, kmajor=kmajor)
            assert cfg in gc.all_configs(), cfg.spec.label
