"""GEMM kernel configurations: what is compiled (KernelSpec), how much shared
memory each needs, and the rule that picks a tile per problem.

A :class:`GemmConfig` is everything kernels/gemm.cu takes as a compile-time
constant: tile width, stages, input type, operand majorness, output type and
the epilogue variant (C, bias, activation, D/C orientation).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .compiler import KernelSpec

BLOCK_M = 128
BLOCK_K = 64
THREADS = 384
IN_BYTES = 2
SMEM_LIMIT = 232448                 # sm_90 opt-in shared memory per block
EPI_BUFFER = 64 * 128               # one 64-row epilogue chunk: 64 lines of 128 B
EPI_BYTES = 2 * 2 * EPI_BUFFER      # 2 consumers x 2 staging buffers
MAX_STAGES = 8

OUT_TYPES = {"float16": 0, "bfloat16": 1, "float32": 2}
BIAS_TYPES = {None: 0, "float32": 1, "bfloat16": 2, "float16": 3}
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "silu": 3}
BLOCK_NS = (64, 128, 256)


@dataclass(frozen=True)
class GemmConfig:
    block_n: int
    in_bf16: bool
    a_kmajor: bool = True
    b_kmajor: bool = True
    out_type: int = -1              # -1: the input type
    has_c: bool = False
    c_colmajor: bool = False
    d_colmajor: bool = False
    bias: int = 0
    bias_on_rows: bool = False
    act: int = 0
    stages: int = 0                 # 0: as many as fit
    cluster_m: int = 1              # 2: CTA pairs on vertically adjacent tiles multicast B
    pingpong: bool = False          # consumers alternate tiles (block_n <= 128) instead of sharing one

    def __post_init__(self):
        if self.out_type == -1:
            object.__setattr__(self, "out_type", 1 if self.in_bf16 else 0)
        if self.stages == 0:
            object.__setattr__(self, "stages", max_stages(self.block_n, self.has_c))

    @property
    def out_bytes(self) -> int:
        return 4 if self.out_type == 2 else 2

    @property
    def epi_cols(self) -> int:
        """Columns per epilogue chunk (one TMA store box)."""
        return 128 // self.out_bytes

    @property
    def smem_bytes(self) -> int:
        """Mirrors kSmemBytes in kernels/gemm.cu."""
        stage = (BLOCK_M + self.block_n) * BLOCK_K * IN_BYTES
        bars = 2 * self.stages + 2 * 2 * 2 + 1 + 2
        return self.stages * stage + EPI_BYTES * (2 if self.has_c else 1) + bars * 8 + 1024

    @property
    def spec(self) -> KernelSpec:
        return KernelSpec.make(
            "gemm.cu", "gemm_kernel", BLOCK_N=self.block_n, STAGES=self.stages, IN_BF16=int(self.in_bf16),
            A_KMAJOR=int(self.a_kmajor), B_KMAJOR=int(self.b_kmajor), OUT_TYPE=self.out_type,
            HAS_C=int(self.has_c), C_COLMAJOR=int(self.c_colmajor), D_COLMAJOR=int(self.d_colmajor),
            BIAS=self.bias, BIAS_ON_ROWS=int(self.bias_on_rows), ACT=self.act, CLUSTER_M=self.cluster_m,
            PINGPONG=int(self.pingpong))


def max_stages(block_n: int, has_c: bool) -> int:
    stage = (BLOCK_M + block_n) * BLOCK_K * IN_BYTES
    fixed = EPI_BYTES * (2 if has_c else 1) + 1024 + 8 * (2 * MAX_STAGES + 11)
    return min(MAX_STAGES, (SMEM_LIMIT - fixed) // stage)


def all_configs() -> list[GemmConfig]:
    """The configurations warm-up compiles by default: every layout and input
    type, with the plain epilogue, for the tiles the heuristic picks (128x128
    ping-pong and cooperative, 128x256) and the swap-AB small-M tile (128x64,
    D column-major)."""
    out = []
    for bf in (True, False):
        for ak in (True, False):
            for bk in (True, False):
                out.append(GemmConfig(128, bf, ak, bk, pingpong=True))
                out.append(GemmConfig(128, bf, ak, bk))
                out.append(GemmConfig(256, bf, ak, bk))
                out.append(GemmConfig(64, bf, ak, bk, d_colmajor=True))
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
    return out


def all_specs(everything: bool = False) -> list[KernelSpec]:
    cfgs = all_configs() + (epilogue_configs() if everything else [])
    return [c.spec for c in cfgs]


def choose_block_n(m: int, n: int, batches: int, sm_count: int, k: int | None = None) -> int:
    """128x256 tiles (cooperative) when they give every SM a tile, except for
    many waves of short-K tiles (K <= 4096 and >= 8 waves of 128x256 tiles),
    where 128x128 ping-pong hides the epilogues that short mainloops expose;
    128x128 (ping-pong, see :func:`choose_pingpong`) when 128x256 tiles would
    leave SMs idle (split-K fills them: 1024x1024x65536 ran 0.99-1.02 of
    cuBLAS with 128x128 vs 0.94-0.95 with 128x256 and 4 splits); 128x64 for
    narrow N (the swap-AB small-M case).  From the H200 probes in
    bench/NOTES.md ("Ping-pong"): 4096^3 cooperative 128x256 0.98 vs ping-pong
    0.95; 4096x14336x4096 ping-pong 1.00-1.02 vs 0.99."""
    if n <= 64:
        return 64
    tiles_256 = batches * -(-m // BLOCK_M) * -(-n // 256)
    if tiles_256 >= sm_count:
        short_k_many_waves = k is not None and k <= 4096 and tiles_256 >= 8 * sm_count
        return 128 if short_k_many_waves else 256
    return 128


def choose_pingpong(block_n: int, tiles: int | None = None, sm_count: int = 132) -> bool:
    """Ping-pong (consumers alternate tiles, the epilogue of one hidden behind
    the other's mainloop) for 128x128 tiles when every CTA gets at least two
    tiles (``tiles`` >= 2 x SMs); with one unit per CTA the second consumer
    would idle (128x8192x8192: ping-pong 0.855 vs cooperative 0.87-0.88 of
    cuBLAS).  128x64 (swap-AB) stays cooperative: not measured yet."""
    return block_n == 128 and (tiles is None or tiles >= 2 * sm_count)


def with_tile(cfg: GemmConfig, block_n: int) -> GemmConfig:
    return replace(cfg, block_n=block_n, stages=max_stages(block_n, cfg.has_c))


def expected_instructions(spec: KernelSpec) -> list[str]:
    d = dict(spec.defines)
    t = "bf16" if d["IN_BF16"] else "f16"
    want = [f"wgmma.mma_async.sync.aligned.m64n{d['BLOCK_N']}k16.f32.{t}.{t}",
            "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes",
            "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group",
            "setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 232",
            "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned",
            "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx", "fence.proxy.async.shared::cta"]
    if d["OUT_TYPE"] != 2:
        want.append("cvt.rn." + ("bf16" if d["OUT_TYPE"] == 1 else "f16") + "x2.f32")
    if d["ACT"] in (2, 3):
        want.append("ex2.approx.ftz.f32")
    if d.get("CLUSTER_M", 1) > 1:
        want += ["multicast::cluster", "mapa.shared::cluster", "barrier.cluster.arrive", "%cluster_ctarank"]
    return want


def tuning_candidates(plan) -> list[dict]:
    """What ``rawcoop.tune`` times for a problem: the heuristic's choice (all
    None), then tile width (with ping-pong on and off for 128x128) x raster
    group x split-K (auto, none, 2, 4) x swap-AB (when M <= 64 < N)."""
    from .scheduler import cdiv
    out = [dict(block_n=None, group=None, swap=None, splits=None, pingpong=None)]
    k_blocks = cdiv(plan.k, BLOCK_K)
    for swap in ((True, False) if plan.swap_ok else (False,)):
        narrow = plan.m if swap else plan.n
        for bn, pp in (((64, False),) if narrow <= 64 else ((128, True), (128, False), (256, False))):
            for group in (4, 8, 16):
                for splits in (None, 1, 2, 4):
                    if splits is not None and splits > k_blocks:
                        continue
                    out.append(dict(block_n=bn, group=group, swap=swap, splits=splits, pingpong=pp))
    return out


LAYOUTS = {"TN": (True, True), "NN": (False, True), "NT": (False, False), "TT": (True, False)}
"""BLAS-style layout names -> (A K-major, B K-major).  As in cuBLAS's column-major
view: "T" for A means A is stored row-major (M, K); "N" for B means B is
column-major (K, N)."""


def config_for_problem(m: int, n: int, k: int, bf16: bool, a_kmajor: bool, b_kmajor: bool,
                       sm_count: int = 132, batches: int = 1) -> GemmConfig:
    """The configuration rawcoop.gemm picks for a plain-epilogue problem (no
    tuning table): swap-AB for M <= 64 < N, then the tile rule."""
    if m <= 64 < n:
        bn = choose_block_n(n, m, batches, sm_count, k)
        return GemmConfig(bn, bf16, b_kmajor, a_kmajor, d_colmajor=True,
                          pingpong=choose_pingpong(bn, tile_count(n, m, bn, batches), sm_count))
    bn = choose_block_n(m, n, batches, sm_count, k)
    return GemmConfig(bn, bf16, a_kmajor, b_kmajor, pingpong=choose_pingpong(bn, tile_count(m, n, bn, batches), sm_count))


def tile_count(m: int, n: int, block_n: int, batches: int = 1) -> int:
    return batches * -(-m // BLOCK_M) * -(-n // block_n)
