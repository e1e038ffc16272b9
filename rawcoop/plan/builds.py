"""The kernels rawcoop builds ahead of use: the sets ``rawcoop warmup`` compiles and the CPU compile tests
check, and the instructions every gemm kernel's PTX must contain.

These are lists of what is built, not planning rules: the planner (rawcoop/plan/select.py) may choose any legal
configuration, and one missing here is compiled at its first use."""
from __future__ import annotations

import json
import os
from functools import lru_cache

from ..compiler import KernelSpec
from .kernel_config import (BLOCK_M, BLOCK_NS, E4M3, E5M2, LOWP_KIND_PAIRS, NARROW_BOX_NS, PTX_TYPES, TALL_BLOCK_M,
                            TALL_BLOCK_NS, TF32, WGMMA_K, GemmConfig, is_fp8, spec_kinds)


@lru_cache(maxsize=None)
def planned_configs(gpu: str = "h200") -> tuple[GemmConfig, ...]:
    """What the planner picks over a grid of LLM shapes (every kind, plain epilogue, default output), stored
    in ``warm_<gpu>.json`` beside this file by tools/pin_plans.py."""
    with open(os.path.join(os.path.dirname(__file__), f"warm_{gpu}.json")) as f:
        return tuple(GemmConfig(**d) for d in json.load(f)["configs"])


def all_configs() -> list[GemmConfig]:
    """The configurations warm-up compiles by default: for both 16-bit kinds and every layout, the plain
    epilogue on the tiles the planner most often chooses - 128x128 cooperative and ping-pong, 128x256,
    128x192, 128x64, both orientations, stream-K, 2x1 and 1x2 clusters, 192-row tiles, and the widths
    between the multiples of 64 (K-major B) alone, with stream-K and in 2x1 clusters; the 128x64 swap-AB
    tile in 1x2 clusters with its staging in the ring."""
    out = []
    for bf in (True, False):
        for ak in (True, False):
            for bk in (True, False):
                out.append(GemmConfig(128, bf, ak, bk, pingpong=True))
                out.append(GemmConfig(128, bf, ak, bk))
                out.append(GemmConfig(256, bf, ak, bk))
                out.append(GemmConfig(128, bf, ak, bk, d_colmajor=True))
                out.append(GemmConfig(128, bf, ak, bk, d_colmajor=True, pingpong=True))
                out.append(GemmConfig(256, bf, ak, bk, d_colmajor=True))
                out.append(GemmConfig(128, bf, ak, bk, stream_k=True))
                out.append(GemmConfig(256, bf, ak, bk, stream_k=True))
                out.append(GemmConfig(192, bf, ak, bk))
                out.append(GemmConfig(192, bf, ak, bk, stream_k=True))
                out.append(GemmConfig(128, bf, ak, bk, cluster_n=2))
                out.append(GemmConfig(128, bf, ak, bk, cluster_m=2))
                out.append(GemmConfig(256, bf, ak, bk, cluster_m=2))
                out.append(GemmConfig(256, bf, ak, bk, cluster_n=2))
                out.append(GemmConfig(64, bf, ak, bk, d_colmajor=True))
                out.append(GemmConfig(64, bf, ak, bk))
            # 128x64 swap-AB tiles in 1x2 clusters: the kernel's A is the user's b (either majorness), its B
            # the user's K-major a
            out.append(GemmConfig(64, bf, ak, True, d_colmajor=True, cluster_n=2))
            out.append(GemmConfig(64, bf, ak, True, d_colmajor=True, cluster_n=2, epi_ring=True))   # its staging in the ring
            # 128x192 in 2x1 clusters: K-major B only (a 2x1 pair splits an N-major B into 128-wide halves)
            out.append(GemmConfig(192, bf, ak, True, cluster_m=2))
            for bn in NARROW_BOX_NS:        # the widths between the multiples of 64
                out.append(GemmConfig(bn, bf, ak, True))
                out.append(GemmConfig(bn, bf, ak, True, stream_k=True))
            for bn in NARROW_BOX_NS[1:]:    # ... in 2x1 pairs
                out.append(GemmConfig(bn, bf, ak, True, cluster_m=2))
            for bk in (True, False):
                for bn in TALL_BLOCK_NS:    # 192-row tiles
                    out.append(GemmConfig(bn, bf, ak, bk, block_m=TALL_BLOCK_M))
    return out


def epilogue_configs() -> list[GemmConfig]:
    """A covering set of the epilogue space (every value of every epilogue
    option at least once, mixed across tiles, layouts and input types), for
    the CPU compile tests and ``warmup --all``."""
    out = []
    combos = [
        # (out_type, has_c, c_col, d_col, bias, bias_rows, act)
        (2, True, False, False, 1, False, 2), (2, False, False, False, 0, False, 1),
        (0, True, True, False, 3, False, 3), (1, True, False, False, 2, False, 2),
        (0, True, True, True, 1, True, 1), (1, True, False, True, 2, True, 3),
        (0, False, False, True, 3, True, 2), (1, False, False, False, 1, False, 0),
        (2, True, False, False, 0, False, 3), (0, True, False, False, 0, False, 0),
    ]
    for i, (ot, hc, cc, dc, bi, br, act) in enumerate(combos):
        bn = BLOCK_NS[i % 3]
        bf = bool(i % 2)
        out.append(GemmConfig(bn, bf, bool(i & 2), bool(i & 4), ot, hc, cc, dc, bi, br, act))
    # clusters of 2 along M (B multicast), both B majornesses and tile widths
    for bn in (128, 256):
        for bk in (True, False):
            out.append(GemmConfig(bn, bn == 256, True, bk, cluster_m=2))
    out.append(GemmConfig(128, True, False, True, 1, True, False, False, 1, False, 2, cluster_m=2))
    # ping-pong consumers with C (two C loader warps), column-major C/D, bias on rows, clusters
    out.append(GemmConfig(128, False, False, False, 0, True, True, False, 3, False, 3, pingpong=True))
    out.append(GemmConfig(128, True, True, True, 2, True, False, False, 1, False, 2, pingpong=True))
    out.append(GemmConfig(64, True, True, False, 1, True, True, True, 2, True, 1, pingpong=True))
    out.append(GemmConfig(128, True, True, False, cluster_m=2, pingpong=True))
    out += cluster_n_configs()
    # 192-row tiles (three consumers, one staging and C buffer each): fp32 out with C, bias and gelu; the
    # swap-AB epilogue (column-major C/D, bias on rows) with silu, 128 wide, M-major A
    out.append(GemmConfig(192, True, True, False, 2, True, False, False, 1, False, 2, block_m=TALL_BLOCK_M))
    out.append(GemmConfig(128, False, False, True, 0, True, True, True, 3, True, 3, block_m=TALL_BLOCK_M))
    # fp32 output column-major (swap-AB with fp32 out, or a column-major fp32 C): two 32-row
    # boxes per chunk - 128x256 swapped with C and bias on rows, 128x64 ping-pong with a column-major C
    # only, 128x128 with C row-major and D column-major, a 192-row tile
    out.append(GemmConfig(256, True, True, True, 2, True, True, True, 1, True, 2))
    out.append(GemmConfig(64, False, False, True, 2, True, True, False, 3, False, 3, pingpong=True))
    out.append(GemmConfig(128, False, True, False, 2, True, False, True, 0, False, 1))
    out.append(GemmConfig(192, True, True, True, 2, True, True, True, 1, True, 2, block_m=TALL_BLOCK_M))
    return out


def cluster_n_configs() -> list[GemmConfig]:
    """1x2 clusters (CTA pairs on horizontally adjacent tiles multicast the A
    tile; appended to :func:`epilogue_configs`): both A majornesses (K-major
    A: each CTA loads 64 of the 128 rows; M-major A: one 64-wide atom each),
    both B majornesses, every tile width, the epilogue with C/bias/activation,
    ping-pong with and without C."""
    out = []
    for bn in (128, 256):
        for ak in (True, False):
            out.append(GemmConfig(bn, bn == 256, ak, ak == (bn == 128), cluster_n=2))
    out.append(GemmConfig(256, False, True, False, 2, True, False, False, 1, False, 2, cluster_n=2))
    out.append(GemmConfig(128, True, False, True, 1, True, True, False, 2, False, 1, cluster_n=2))
    out.append(GemmConfig(128, True, False, False, cluster_n=2, pingpong=True))
    out.append(GemmConfig(128, False, True, True, 0, True, True, False, 3, False, 3, pingpong=True, cluster_n=2))
    out.append(GemmConfig(64, True, True, False, 1, True, True, True, 2, True, 1, cluster_n=2))
    return out


def lowp_configs() -> list[GemmConfig]:
    """The tf32 and fp8 kernels ``warmup --all`` adds: for every (A, B) kind pair, TN only (K-major A and B),
    the plain epilogue with the default output on 128x128 (cooperative and ping-pong, both orientations),
    128x256 (both orientations, 2x1 clusters; fp8 1x2 ones too), fp8 128x128 in both cluster shapes, 128x64
    (the swap-AB one with a 16-bit output) and the 192-row tiles."""
    out = []
    for ka, kb in LOWP_KIND_PAIRS:
        out.append(GemmConfig(128, ka, pingpong=True, b_kind=kb))
        out.append(GemmConfig(128, ka, b_kind=kb))
        if is_fp8(ka):
            out.append(GemmConfig(128, ka, b_kind=kb, cluster_n=2))
            out.append(GemmConfig(128, ka, b_kind=kb, cluster_m=2))
        out.append(GemmConfig(256, ka, b_kind=kb))
        out.append(GemmConfig(256, ka, b_kind=kb, cluster_m=2))  
        if is_fp8(ka):
            out.append(GemmConfig(256, ka, b_kind=kb, cluster_n=2))
        out.append(GemmConfig(128, ka, d_colmajor=True, b_kind=kb))       # swap-AB for waves
        out.append(GemmConfig(128, ka, d_colmajor=True, pingpong=True, b_kind=kb))   # ... and its ping-pong
        out.append(GemmConfig(256, ka, d_colmajor=True, b_kind=kb))
        out.append(GemmConfig(64, ka, out_type=1, d_colmajor=True, b_kind=kb))
        out.append(GemmConfig(64, ka, b_kind=kb))
        for bn in TALL_BLOCK_NS:            # 192-row tiles
            out.append(GemmConfig(bn, ka, b_kind=kb, block_m=TALL_BLOCK_M))
    return out


def lowp_epilogue_configs() -> list[GemmConfig]:
    """tf32/fp8 with the epilogue variants (C, bias, activations, every output
    type, swap-AB's column-major C/D and row bias) and clusters, for the CPU
    compile tests: every kind pair with 128- and 256-wide tiles."""
    out = []
    combos = [
        # (block_n, out_type, has_c, c_col, d_col, bias, bias_rows, act, cluster, pingpong)
        (128, 2, True, False, False, 1, False, 2, 1, False),
        (256, 0, True, False, False, 3, False, 3, 1, False),
        (128, 1, True, True, True, 2, True, 1, 1, True),
        (256, 1, False, False, False, 1, False, 1, 2, False),
        (128, 2, False, False, False, 0, False, 0, 2, True),
    ]
    for i, (ka, kb) in enumerate(LOWP_KIND_PAIRS):
        for j, (bn, ot, hc, cc, dc, bi, br, act, cl, pp) in enumerate(combos):
            if (i + j) % 2 and j >= 3:
                continue                    # clusters: a few kinds suffice
            out.append(GemmConfig(bn, ka, True, True, ot, hc, cc, dc, bi, br, act, cluster_m=cl, pingpong=pp,
                                  b_kind=kb))
    # 1x2 clusters (A multicast): tf32 with C, mixed fp8 ping-pong, fp8 256-wide
    out.append(GemmConfig(256, TF32, True, True, 2, True, False, False, 1, False, 1, cluster_n=2))
    out.append(GemmConfig(128, E4M3, True, True, 1, False, False, False, 0, False, 0, pingpong=True,
                          b_kind=E5M2, cluster_n=2))
    out.append(GemmConfig(256, E5M2, True, True, 0, True, False, False, 3, False, 3, cluster_n=2))
    # fp32 output column-major: tf32 swap-AB with C and bias on rows; fp8 with a column-major C
    out.append(GemmConfig(256, TF32, True, True, 2, True, True, True, 1, True, 2))
    out.append(GemmConfig(128, TF32, True, True, 2, False, False, True, 0, False, 0, pingpong=True))
    out.append(GemmConfig(128, E4M3, True, True, 2, True, True, False, 2, False, 1))
    return out


def block_scaled_configs() -> list[GemmConfig]:
    """Block-scaled fp8 (scale_mode=1) kernels, for ``warmup --all`` and the
    CPU compile tests: the tiles the host picks (128x128 cooperative, 128x64
    for narrow N, both with the default bf16 output), 128x64 ping-pong, mixed
    e4m3 x e5m2 / e5m2, the epilogue with C (row- and column-major), bias,
    activations and every output type, and both cluster shapes."""
    E, F = E4M3, E5M2
    return [
        GemmConfig(128, E, scale_mode=1),
        GemmConfig(64, E, scale_mode=1),
        GemmConfig(64, E, pingpong=True, scale_mode=1),
        GemmConfig(128, E, b_kind=F, scale_mode=1),
        GemmConfig(64, F, b_kind=E, out_type=2, scale_mode=1),
        GemmConfig(128, E, True, True, 2, True, False, False, 1, False, 2, scale_mode=1),
        GemmConfig(128, E, True, True, 0, True, True, False, 3, False, 3, scale_mode=1),
        GemmConfig(64, E, True, True, 1, True, False, False, 2, False, 1, pingpong=True, scale_mode=1),
        GemmConfig(128, E, cluster_m=2, scale_mode=1),
        GemmConfig(128, E, cluster_n=2, scale_mode=1),
        GemmConfig(64, E, True, True, 1, True, False, False, 1, False, 0, cluster_n=2, scale_mode=1),
    ]


def stream_k_configs() -> list[GemmConfig]:
    """Stream-K kernels (``_streamk=True``, opt-in) for ``warmup --all`` and
    the CPU compile tests: both 16-bit kinds on the tiles the planner often picks
    for large problems (128x256, 128x128 cooperative), all four layouts
    between them, C/bias/activation and fp32 output, fp8 per-tensor and
    block-scaled, tf32; ping-pong 128x128 (``_pingpong=True, _streamk=True``).
    With C and 128x256 tiles the C-loader warp (40 registers) spills a few
    bytes: its per-unit stream-K range arithmetic (tests/cpu/test_compile.py
    bounds it)."""
    return [
        GemmConfig(256, True, stream_k=True),
        GemmConfig(256, False, stream_k=True),
        GemmConfig(128, True, stream_k=True),
        GemmConfig(128, False, False, False, stream_k=True),
        GemmConfig(256, True, False, True, stream_k=True),
        GemmConfig(128, False, True, False, 2, True, False, False, 1, False, 2, stream_k=True),
        GemmConfig(256, True, True, True, 1, True, False, False, 0, False, 3, stream_k=True),
        GemmConfig(256, E4M3, stream_k=True),
        GemmConfig(128, E4M3, scale_mode=1, stream_k=True),
        GemmConfig(256, TF32, stream_k=True),
        # ping-pong 128x128 (opt-in only: slower than ping-pong data-parallel on 24 of 30 measured
        # shapes): the consumers alternate units, stream-K pieces included; the serial chain fix-up
        GemmConfig(128, True, pingpong=True, stream_k=True),
        GemmConfig(128, False, False, False, pingpong=True, stream_k=True),
        GemmConfig(128, True, True, False, 2, True, False, False, 1, False, 2, pingpong=True, stream_k=True),
        GemmConfig(128, E4M3, pingpong=True, stream_k=True),
        GemmConfig(128, TF32, pingpong=True, stream_k=True),
    ]



def all_specs(everything: bool = False) -> list[KernelSpec]:
    """The default warm-up set (:func:`all_configs` and the planner's 16-bit grid choices), or with
    ``everything`` every set here."""
    planned = [c for c in planned_configs() if everything or c.in_bytes == 2]
    cfgs = all_configs() + planned + (epilogue_configs() + lowp_configs() + block_scaled_configs() + stream_k_configs()
                            if everything else [])
    return list(dict.fromkeys(c.spec for c in cfgs))     # (stream_k_configs repeats some defaults)


def expected_instructions(spec: KernelSpec) -> list[str]:
    d = dict(spec.defines)
    ka, kb = spec_kinds(spec)
    want = [f"wgmma.mma_async.sync.aligned.m64n{d['BLOCK_N']}k{WGMMA_K[ka]}.f32.{PTX_TYPES[ka]}.{PTX_TYPES[kb]}",
            "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes",
            "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group",
            "setmaxnreg.dec.sync.aligned.u32 40",
            f"setmaxnreg.inc.sync.aligned.u32 {232 if d.get('BLOCK_M', BLOCK_M) == BLOCK_M else 152}",
            "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned",
            "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx", "fence.proxy.async.shared::cta"]
    if d["OUT_TYPE"] != 2:
        want.append("cvt.rn." + ("bf16" if d["OUT_TYPE"] == 1 else "f16") + "x2.f32")
    if d["ACT"] in (2, 3):
        want.append("ex2.approx.ftz.f32")
    if d.get("CLUSTER_M", 1) > 1 or d.get("CLUSTER_N", 1) > 1:
        want += ["multicast::cluster", "mapa.shared::cluster", "barrier.cluster.arrive", "%cluster_ctarank"]
    if is_fp8(ka):
        want.append("ld.global.cg.f32")         # the per-tensor scales, or block-scaled SB, read on the device
    if d.get("SCALE_MODE", 0) == 1:
        want += ["ld.shared.f32", "fma.rn.f32"]  # SA from the stage; the promotion acc += tmp * (sa * sb)
    return want
