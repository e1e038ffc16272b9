"""GEMM kernel configurations: what is compiled (KernelSpec), how much shared memory each needs, and the rules that
pick a plan per problem.

A :class:`GemmConfig` is everything kernels/gemm.cu takes as a compile-time constant: tile width, stages, input
kinds, operand majorness, output type and the epilogue variant (C, bias, activation, D/C orientation).

Input kinds (``IN_KIND`` for A, ``IN_KIND_B`` for B): 0 fp16, 1 bf16, 2 tf32 (fp32 in memory), 3 fp8 e4m3, 4 fp8
e5m2.  A K-major shared-memory row is always 128 bytes, so a k-block holds ``128 / element bytes`` K values
(:attr:`GemmConfig.block_k`: 64, 32 or 128) and the stage sizes, shared memory and stage counts do not depend on
the kind.

Scale modes (``scale_mode``, fp8 only): 0 per-tensor (the ``scale_a``/``scale_b`` pointers), 1 block-scaled
(``SCALE_MODE=1``: fp32 scales per 1x128 (row, k-block) of A and per 128x128 block of B, promoted per k-block in
the mainloop; each stage carries 512 more bytes, the 128 A scales of its k-block; 128x128 cooperative or 128x64
tiles only, see kernels/gemm.cu).

The evidence quoted for a rule's constant comes from one H200 (132 SMs): the automatic plans with and without the
rule, timed on the same normal-data operands in alternating rounds; "out of sample" means random shapes whose plan
the rule moves, drawn after the rule was fitted.  The stored per-shape measurements of every distinct plan are
bench/results/oracle-h200.jsonl; docs/planner.md summarises the rules."""
from __future__ import annotations

import numbers
from dataclasses import dataclass, replace

from ..compiler import KernelSpec

BLOCK_M = 128                       # the default tile height; TALL_BLOCK_M with three consumer warpgroups
TALL_BLOCK_M = 192
TALL_BLOCK_NS = (128, 192)          # tall tiles: 96 accumulators per thread at most (setmaxnreg 152)
BLOCK_K = 64                        # 16-bit inputs; in general GemmConfig.block_k = ROW_BYTES / element bytes
ROW_BYTES = 128                     # a K-major shared-memory row: one 128B swizzle atom, for every kind
THREADS = 384                       # 128-row tiles; GemmConfig.threads in general
SMEM_LIMIT = 232448                 # sm_90 opt-in shared memory per block
EPI_BUFFER = 64 * 128               # one 64-row epilogue chunk: 64 lines of 128 B
MAX_STAGES = 8
MAX_STAGES_RING = 9                 # with the staging buffers in the ring (epi_ring): 128x64 tiles fit 9
SCALE_BLOCK = 128                   # block-scaled fp8: K (and B's N) extent of one scale; = the fp8 BLOCK_K
SA_STAGE_BYTES = BLOCK_M * 4        # block-scaled fp8: the 128 fp32 A scales each stage carries
BLOCK_SCALED_NS = (64, 128)         # block-scaled tiles: acc + promotion temporaries <= 128 registers

OUT_TYPES = {"float16": 0, "bfloat16": 1, "float32": 2}
BIAS_TYPES = {None: 0, "float32": 1, "bfloat16": 2, "float16": 3}
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "silu": 3}
BLOCK_NS = (64, 128, 256)
NARROW_BOX_NS = (144, 160, 176, 208, 224, 240)
"""Tile widths between the multiples of 64 (16-bit inputs, K-major B, row-major D, 128-row tiles, not
block-scaled): widths whose tile counts fill the waves where 128 / 192 / 256 do not (cuBLAS runs 144,
176, 224-wide tiles on such shapes).  Their epilogue stores in 32-byte-wide TMA boxes where the width
is not a multiple of the output chunk (kernels/gemm.cu "Narrow boxes", :attr:`GemmConfig.box_cols`)."""
BUILT_BLOCK_NS = tuple(sorted((*BLOCK_NS, 192, *NARROW_BOX_NS)))
"""Every tile width kernels/gemm.cu builds for 16-bit inputs (tf32 and fp8: BLOCK_NS and 192)."""

FP16, BF16, TF32, E4M3, E5M2 = range(5)
IN_KINDS = {"float16": FP16, "bfloat16": BF16, "tf32": TF32, "e4m3": E4M3, "e5m2": E5M2}
KIND_NAMES = {v: k for k, v in IN_KINDS.items()}
PTX_TYPES = {FP16: "f16", BF16: "bf16", TF32: "tf32", E4M3: "e4m3", E5M2: "e5m2"}
ELEMENT_BYTES = {FP16: 2, BF16: 2, TF32: 4, E4M3: 1, E5M2: 1}
WGMMA_K = {FP16: 16, BF16: 16, TF32: 8, E4M3: 32, E5M2: 32}   # K of one wgmma: always 32 bytes
DEFAULT_OUT = {FP16: 0, BF16: 1, TF32: 2, E4M3: 1, E5M2: 1}   # out_type when none is given
LOWP_KIND_PAIRS = ((TF32, TF32), (E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2), (E5M2, E4M3))
"""(A, B) kinds of the tf32/fp8 kernels: wgmma takes e4m3 and e5m2 in any combination."""


def block_k_of(kind: int) -> int:
    """K values per k-block (one 128-byte row) of an input kind: 64 (16-bit), 32 (tf32), 128 (fp8)."""
    return ROW_BYTES // ELEMENT_BYTES[kind]


def is_fp8(kind: int) -> bool:
    return kind in (E4M3, E5M2)


@dataclass(frozen=True)
class GemmConfig:
    block_n: int
    in_kind: int                    # A's input kind (0 fp16, 1 bf16, 2 tf32, 3 e4m3, 4 e5m2); True/False: bf16/fp16
    a_kmajor: bool = True
    b_kmajor: bool = True
    out_type: int = -1              # -1: the input kind's default (DEFAULT_OUT: fp16, bf16, fp32 for tf32, bf16 for fp8)
    has_c: bool = False
    c_colmajor: bool = False
    d_colmajor: bool = False
    bias: int = 0
    bias_on_rows: bool = False
    act: int = 0
    stages: int = 0                 # 0: as many as fit
    cluster_m: int = 1              # 2: CTA pairs on vertically adjacent tiles multicast B
    pingpong: bool = False          # consumers alternate tiles (block_n <= 128) instead of sharing one
    b_kind: int = -1                # B's input kind; -1: in_kind (only fp8 A and B may differ)
    cluster_n: int = 1              # 2: CTA pairs on horizontally adjacent tiles multicast A (not with cluster_m=2)
    scale_mode: int = 0             # fp8: 0 per-tensor scales, 1 block-scaled (1x128 A, 128x128 B)
    stream_k: bool = False          # the partial last wave as stream-K ranges (STREAM_K=1; no clusters)
    block_m: int = BLOCK_M          # 128, or 192: three consumer warpgroups (kernels/gemm.cu "Tall tiles")
    epi_ring: bool = False          # staging buffers in the ring's A stages (EPI_RING=1): one unit per CTA only

    def __post_init__(self):
        object.__setattr__(self, "in_kind", int(self.in_kind))
        if self.b_kind == -1:
            object.__setattr__(self, "b_kind", self.in_kind)
        object.__setattr__(self, "b_kind", int(self.b_kind))
        if self.in_kind not in ELEMENT_BYTES or self.b_kind not in ELEMENT_BYTES:
            raise ValueError(f"input kinds must be 0..4, got {self.in_kind} and {self.b_kind}")
        if self.in_kind != self.b_kind and not (is_fp8(self.in_kind) and is_fp8(self.b_kind)):
            raise ValueError(f"A and B kinds may differ only for fp8, got {self.in_kind} and {self.b_kind}")
        if self.in_bytes != 2 and not (self.a_kmajor and self.b_kmajor):
            raise ValueError("wgmma cannot transpose 32-bit/8-bit operands: tf32 and fp8 configurations "
                             "need K-major A and B")
        if self.cluster_m not in (1, 2) or self.cluster_n not in (1, 2) or self.cluster_m * self.cluster_n > 2:
            raise ValueError(f"clusters are 1x1, 2x1 or 1x2 (cluster_m x cluster_n), got "
                             f"{self.cluster_m}x{self.cluster_n}")
        if self.block_n not in BUILT_BLOCK_NS:
            raise ValueError(f"block_n must be one of {BUILT_BLOCK_NS}, got {self.block_n}")
        if self.block_n in NARROW_BOX_NS and (self.in_bytes != 2 or not self.b_kmajor or self.d_colmajor
                                              or self.block_m != BLOCK_M or self.scale_mode):
            raise ValueError(f"128x{self.block_n} tiles (between the multiples of 64) need 16-bit inputs, a K-major "
                             "kernel B (no 64-column B atoms), a row-major kernel D (no swap-AB) and 128-row tiles")
        if self.cluster_m == 2 and self.block_n < 128:
            raise ValueError("a 2x1 cluster (B multicast) needs a 128- or 256-wide tile")
        if self.scale_mode not in (0, 1):
            raise ValueError(f"scale_mode must be 0 (per-tensor) or 1 (block-scaled), got {self.scale_mode}")
        if self.scale_mode == 1:
            if not (is_fp8(self.in_kind) and is_fp8(self.b_kind)):
                raise ValueError("block-scaled configurations (scale_mode=1) need fp8 A and B")
            if self.block_n not in BLOCK_SCALED_NS or (self.pingpong and self.block_n != 64):
                raise ValueError(f"block-scaled fp8 needs a 128x128 cooperative or 128x64 tile (accumulators + "
                                 f"promotion temporaries in 128 registers), got 128x{self.block_n}"
                                 f"{' ping-pong' if self.pingpong else ''}")
        if self.stream_k and (self.cluster_size > 1 or (self.pingpong and self.scale_mode)):
            raise ValueError("stream-K configurations (stream_k=True) are without clusters, and ping-pong "
                             "stream-K is not built block-scaled")
        if self.block_m not in (BLOCK_M, TALL_BLOCK_M):
            raise ValueError(f"block_m must be {BLOCK_M} or {TALL_BLOCK_M}, got {self.block_m}")
        if self.block_m == TALL_BLOCK_M and (self.block_n not in TALL_BLOCK_NS or self.pingpong or self.stream_k
                                             or self.cluster_size > 1 or self.scale_mode):
            raise ValueError(f"192-row tiles are cooperative, {' or '.join(map(str, TALL_BLOCK_NS))} wide, "
                             "without clusters, stream-K or block scales")
        if self.epi_ring and (self.pingpong or self.stream_k or self.block_m != BLOCK_M or self.scale_mode):
            raise ValueError("epi_ring (staging buffers in the ring) needs a cooperative 128-row tile without "
                             "stream-K or block scales")
        if self.bias == 0 and self.bias_on_rows:
            # BIAS_ON_ROWS only matters with a bias: one spec (and one warmed kernel) for both.  gemm
            # passes bias_on_rows = swap; without this a bias-free swap-AB plan named a kernel the
            # warm-up never compiled.
            object.__setattr__(self, "bias_on_rows", False)
        if self.out_type == -1:
            object.__setattr__(self, "out_type", DEFAULT_OUT[self.in_kind])
        if self.stages == 0:
            object.__setattr__(self, "stages", max_stages(self.block_n, self.has_c, self.scale_mode, self.block_m,
                                                          self.epi_ring))

    @property
    def in_bf16(self) -> bool:
        return self.in_kind == BF16

    @property
    def in_bytes(self) -> int:
        return ELEMENT_BYTES[self.in_kind]

    @property
    def block_k(self) -> int:
        """K values per k-block (:func:`block_k_of` A's kind; B's is the same size)."""
        return block_k_of(self.in_kind)

    @property
    def fp8(self) -> bool:
        """fp8 kernels take the scale_a/scale_b pointer arguments."""
        return is_fp8(self.in_kind)

    @property
    def block_scaled(self) -> bool:
        """Block-scaled fp8 (SCALE_MODE 1): the kernel takes SA's map and SB's pointer and strides."""
        return self.scale_mode == 1

    @property
    def out_bytes(self) -> int:
        return 4 if self.out_type == 2 else 2

    @property
    def epi_cols(self) -> int:
        """Columns per epilogue chunk (one TMA store box, or several narrow ones: :attr:`box_cols`)."""
        return 128 // self.out_bytes

    @property
    def narrow_box(self) -> bool:
        """The tile width is not a multiple of the chunk: row-major C and D move in 32-byte-wide boxes."""
        return self.block_n % self.epi_cols != 0

    @property
    def box_cols(self) -> int:
        """Columns of a row-major C/D TMA box: a whole chunk, or 32 bytes with narrow boxes."""
        return 32 // self.out_bytes if self.narrow_box else self.epi_cols

    @property
    def consumers(self) -> int:
        """Consumer warpgroups (kConsumers): one per 64 rows; ping-pong's two alternate tiles."""
        return self.block_m // 64

    @property
    def threads(self) -> int:
        """Threads per CTA: the producer warpgroup and the consumers (384, or 512 for 192-row tiles)."""
        return 128 * (1 + self.consumers)

    @property
    def smem_bytes(self) -> int:
        """Mirrors kSmemBytes in kernels/gemm.cu (the same for every input kind)."""
        stage, fixed = _smem_layout(self.block_m, self.block_n, self.has_c, self.scale_mode, self.epi_ring)
        return self.stages * (stage + STAGE_BARRIER_BYTES) + fixed

    @property
    def cluster(self) -> tuple[int, int]:
        """(cluster_m, cluster_n): (1, 1), (2, 1) or (1, 2)."""
        return self.cluster_m, self.cluster_n

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster (launched as a cluster of (cluster_size, 1, 1))."""
        return self.cluster_m * self.cluster_n

    @property
    def spec(self) -> KernelSpec:
        kinds = dict(IN_KIND=self.in_kind)
        if self.b_kind != self.in_kind:
            kinds["IN_KIND_B"] = self.b_kind
        if self.cluster_n != 1:             # only when set: every other spec (and cache key) stays as it was
            kinds["CLUSTER_N"] = self.cluster_n
        if self.scale_mode != 0:            # likewise
            kinds["SCALE_MODE"] = self.scale_mode
        if self.stream_k:                   # likewise
            kinds["STREAM_K"] = 1
        if self.block_m != BLOCK_M:         # likewise
            kinds["BLOCK_M"] = self.block_m
        if self.epi_ring:                   # likewise
            kinds["EPI_RING"] = 1
        return KernelSpec.make(
            "gemm.cu", "gemm_kernel", BLOCK_N=self.block_n, STAGES=self.stages, **kinds,
            A_KMAJOR=int(self.a_kmajor), B_KMAJOR=int(self.b_kmajor), OUT_TYPE=self.out_type,
            HAS_C=int(self.has_c), C_COLMAJOR=int(self.c_colmajor), D_COLMAJOR=int(self.d_colmajor),
            BIAS=self.bias, BIAS_ON_ROWS=int(self.bias_on_rows), ACT=self.act, CLUSTER_M=self.cluster_m,
            PINGPONG=int(self.pingpong))


def spec_kinds(spec: KernelSpec) -> tuple[int, int]:
    """(A kind, B kind) of a gemm_kernel spec."""
    d = dict(spec.defines)
    return d["IN_KIND"], d.get("IN_KIND_B", d["IN_KIND"])


def epi_buffers(block_m: int) -> int:
    """Staging (and C) buffers per consumer (kEpiBuffers): two alternate; 192-row tiles keep one."""
    return 2 if block_m == BLOCK_M else 1


STAGE_BARRIER_BYTES = 16           # a stage's full and empty mbarriers


def _smem_layout(block_m: int, block_n: int, has_c: bool, scale_mode: int,
                 epi_ring: bool = False) -> tuple[int, int]:
    """kernels/gemm.cu's shared-memory map as (bytes per stage without its
    barriers, bytes that do not depend on the stage count: the staging and C
    buffers, their barriers, first_load and turn[], 1024 of alignment slack).
    ``epi_ring``: the staging buffers live in the ring's A stages."""
    consumers = block_m // 64
    buffers = consumers * epi_buffers(block_m)
    stage = (block_m + block_n) * ROW_BYTES + (SA_STAGE_BYTES if scale_mode == 1 else 0)
    staging = buffers * EPI_BUFFER * ((1 if has_c else 0) + (0 if epi_ring else 1))
    return stage, staging + 8 * (2 * buffers + 1 + consumers) + 1024


def max_stages(block_n: int, has_c: bool, scale_mode: int = 0, block_m: int = BLOCK_M,
               epi_ring: bool = False) -> int:
    """As many stages as fit beside the fixed part, counting barriers for the
    cap, at most MAX_STAGES (MAX_STAGES_RING with the staging buffers in the
    ring)."""
    cap = MAX_STAGES_RING if epi_ring else MAX_STAGES
    stage, fixed = _smem_layout(block_m, block_n, has_c, scale_mode, epi_ring)
    return min(cap, (SMEM_LIMIT - fixed - STAGE_BARRIER_BYTES * cap) // stage)


def all_configs() -> list[GemmConfig]:
    """The configurations warm-up compiles by default: every layout and input
    type, with the plain epilogue, for the tiles the heuristic picks (128x128
    ping-pong and cooperative, 128x256, both cooperative ones with stream-K
    too (choose_stream_k), 128x128 with 1x2 and 2x1 clusters (choose_cluster),
    128x256 with 2x1 and 1x2 clusters (misaligned_pitch_config, misaligned_pair_1x2),
    128x64 for 64 < M <= 128) and the swap-AB small-M tile (128x64, D
    column-major), with 1x2 clusters too (one_row_pair_fits), 192x192 /
    192x128 tiles (choose_tall), and 128x256 / 128x128 swap-AB tiles for
    large problems (swap_waves_limit; the latter cooperative and ping-pong:
    the ping-pong tile rules also run on the swapped view), 128x192 with and
    without stream-K (choose_width_192), and 128x192 with 2x1 clusters for
    K-major B (misaligned_width_192_fits), 128x144 ... 128x240 with and
    without stream-K for K-major B (choose_narrow_width), 128x160 ... 128x240 with
    2x1 clusters for K-major B (misaligned_narrow_width)."""
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
                out.append(GemmConfig(192, bf, ak, bk))                 # 128x192 (choose_width_192)
                out.append(GemmConfig(192, bf, ak, bk, stream_k=True))
                out.append(GemmConfig(128, bf, ak, bk, cluster_n=2))
                out.append(GemmConfig(128, bf, ak, bk, cluster_m=2))
                out.append(GemmConfig(256, bf, ak, bk, cluster_m=2))    # misaligned pitches (misaligned_pitch_config)
                out.append(GemmConfig(256, bf, ak, bk, cluster_n=2))    # ... their 1x2 pairs (misaligned_pair_1x2)
                out.append(GemmConfig(64, bf, ak, bk, d_colmajor=True))
                out.append(GemmConfig(64, bf, ak, bk))
            # the paired one-row arrangement (one_row_pair_fits): swap-AB, so the kernel's A is the
            # user's b (either majorness) and its B the user's K-major a
            out.append(GemmConfig(64, bf, ak, True, d_colmajor=True, cluster_n=2))
            out.append(GemmConfig(64, bf, ak, True, d_colmajor=True, cluster_n=2, epi_ring=True))   # its staging in the ring
            # misaligned pitches with 192-wide columns padding N less (misaligned_width_192_fits): K-major B only
            out.append(GemmConfig(192, bf, ak, True, cluster_m=2))
            for bn in NARROW_BOX_NS:        # the widths between the multiples of 64 (choose_narrow_width)
                out.append(GemmConfig(bn, bf, ak, True))
                out.append(GemmConfig(bn, bf, ak, True, stream_k=True))
            for bn in NARROW_RULE_NS:       # ... in misaligned-pitch 2x1 pairs (misaligned_narrow_width)
                out.append(GemmConfig(bn, bf, ak, True, cluster_m=2))
            for bk in (True, False):
                for bn in TALL_BLOCK_NS:    # 192-row tiles (choose_tall)
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
    """The tf32 and fp8 kernels ``warmup --all`` adds: for every (A, B) kind
    pair, TN only (K-major A and B), the plain-epilogue tiles the heuristic
    picks (128x128 ping-pong and cooperative, 128x256, 128x64 for 64 < M <= 128,
    fp8 128x128 with 1x2 and 2x1 clusters, 128x256 with 2x1 clusters
    (misaligned_pitch_config; fp8 with 1x2 ones too, misaligned_pair_1x2), 192x192 and 192x128, the 128x256 and
    128x128 swap-AB tiles of swap_waves_limit, the latter cooperative and
    ping-pong: fp8's one-wave band) with the default output (fp32 for
    tf32, bf16 for fp8), and the swap-AB small-M tile (128x64, D column-major:
    16-bit output, so bf16)."""
    out = []
    for ka, kb in LOWP_KIND_PAIRS:
        out.append(GemmConfig(128, ka, pingpong=True, b_kind=kb))
        out.append(GemmConfig(128, ka, b_kind=kb))
        if is_fp8(ka):
            out.append(GemmConfig(128, ka, b_kind=kb, cluster_n=2))
            out.append(GemmConfig(128, ka, b_kind=kb, cluster_m=2))
        out.append(GemmConfig(256, ka, b_kind=kb))
        out.append(GemmConfig(256, ka, b_kind=kb, cluster_m=2))      # misaligned pitches (misaligned_pitch_config)
        if is_fp8(ka):
            out.append(GemmConfig(256, ka, b_kind=kb, cluster_n=2))  # ... their 1x2 pairs (misaligned_pair_1x2)
        out.append(GemmConfig(128, ka, d_colmajor=True, b_kind=kb))       # swap-AB for waves
        out.append(GemmConfig(128, ka, d_colmajor=True, pingpong=True, b_kind=kb))   # ... and its ping-pong
        out.append(GemmConfig(256, ka, d_colmajor=True, b_kind=kb))
        out.append(GemmConfig(64, ka, out_type=1, d_colmajor=True, b_kind=kb))
        out.append(GemmConfig(64, ka, b_kind=kb))
        for bn in TALL_BLOCK_NS:            # 192-row tiles (choose_tall)
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
    the CPU compile tests: both 16-bit kinds on the tiles the heuristic picks
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


def cluster_dims(cluster) -> tuple[int, int]:
    """``rawcoop.gemm``'s ``_cluster`` option as (cluster_m, cluster_n):
    None or 1 → (1, 1); 2 → (2, 1) (CTA pairs along M multicast B, as it has
    always meant); a pair (2, 1) or (1, 2) (pairs along N multicast A) as
    given.  ValueError for anything else."""
    if cluster is None:
        return 1, 1
    if isinstance(cluster, numbers.Integral) and not isinstance(cluster, bool) and cluster in (1, 2):
        return (1, 1) if cluster == 1 else (2, 1)
    if isinstance(cluster, (tuple, list)) and len(cluster) == 2 and tuple(cluster) in ((1, 1), (2, 1), (1, 2)):
        return int(cluster[0]), int(cluster[1])
    raise ValueError(f"_cluster must be None, 1, 2 (= (2, 1)), (2, 1) (CTA pairs along M share B) or (1, 2) "
                     f"(pairs along N share A); got {cluster!r}")


def all_specs(everything: bool = False) -> list[KernelSpec]:
    cfgs = all_configs() + (epilogue_configs() + lowp_configs() + block_scaled_configs() + stream_k_configs()
                            if everything else [])
    return list(dict.fromkeys(c.spec for c in cfgs))     # (stream_k_configs repeats some defaults)


ONE_ROW_NARROW_FILL = 0.9
"""One tile row (M <= 128): 128x64 tiles over the whole K when they fill at least this share of the SMs."""


def one_row_narrow_fits(m: int, n: int, batches: int, sm_count: int) -> bool:
    """One tile row (M <= 128) whose 128x128 tiles would leave SMs idle and
    whose 128x64 tiles fill 90-100% of them: the case for 128x64 tiles over
    the whole K (:func:`choose_block_n`), un-swapped (:func:`choose_swap`)."""
    return (m <= BLOCK_M and tile_count(m, n, 128, batches) < sm_count
            and ONE_ROW_NARROW_FILL * sm_count <= tile_count(m, n, 64, batches) <= sm_count)


ONE_ROW_PAIR_MIN_M = 120
ONE_ROW_PAIR_K = (8192, 16384)
"""one_row_pair_fits: the M and K ranges where the paired swap-AB arrangement was measured faster."""


def one_row_pair_fits(m: int, n: int, k: int, batches: int, sm_count: int, *, in_kind: int,
                      a_kmajor: bool) -> bool:
    """Where one row of 128x64 tiles fits (:func:`one_row_narrow_fits`), 16-bit inputs with A K-major (TN, TT), one
    batch, ONE_ROW_PAIR_MIN_M <= M <= 128 and 8192 <= K <= 16384: run cuBLAS's arrangement instead, swap-AB (the
    kernel's M is N, in 128-row tiles; its N is M, two 64-wide tile columns) with 1x2 clusters, so the two CTAs of
    a pair share and multicast the streamed operand (B^T, 128 rows per k-block, each CTA loading 64) and each
    loads only its own 64 rows of the small A.  Un-swapped, every CTA asks L2 for A's 128 rows plus its 64 of B
    per k-block (192 lines); paired, for 64 + 64, as cuBLAS's nvjet_sm90_tst_128x64_64x8_1x2 does (ncu: its L2
    requests and sectors match ours within 7%).

    H200, batch timing: bf16 128x8192x8192 TN 427 vs 399 TFLOP/s un-paired, out of sample 120x8000x10000 +13%; M =
    116 and 96, K = 4096 and K = 28672, per-tensor fp8 and an M-major A (NN) were not faster, hence the ranges.
    The pairs need 8 stages of loads in flight (6 stages: 387 vs 431 TFLOP/s)."""
    return (in_kind in (FP16, BF16) and a_kmajor and batches == 1 and ONE_ROW_PAIR_MIN_M <= m <= BLOCK_M
            and ONE_ROW_PAIR_K[0] <= k <= ONE_ROW_PAIR_K[1] and one_row_narrow_fits(m, n, batches, sm_count))


def swap_buildable(*, block: bool) -> bool:
    """Whether a swap-AB kernel exists for the call (it stores D^T through a column-major epilogue, built for every
    output type): block-scaled fp8 never swaps (its scales are laid out per row of A)."""
    return not block


def choose_swap(swap, m: int, n: int, batches: int, sm_count: int, *, out_fp32: bool, block: bool) -> bool:
    """Swap-AB (D^T = B^T A^T, the kernel's M is N) or not: never for block-scaled fp8; else the forced ``_swap``;
    else not for fp32 output (the automatic choice was measured with 16-bit output only); else for M <= 64 < N,
    unless one row of 128x64 whole-K tiles fits (:func:`one_row_narrow_fits`), which ran faster than swap-AB
    (128x64 tiles on N and split-K) on the H200: bf16 64x8192x8192 0.999 vs 0.979 of cuBLAS, e4m3 0.969 vs 0.912
    of cuBLASLt."""
    if not swap_buildable(block=block):
        return False
    if swap is not None:
        return bool(swap)
    return not out_fp32 and m <= 64 < n and not one_row_narrow_fits(m, n, batches, sm_count)


WIDE_SPLIT_MIN_K = 16384           # wide_split_k_fits, on a tie: K each split of a 128x256 tile keeps at least
WIDE_SPLIT_MIN_K_FASTER = 8192     # ... when the 128x256 split is the shorter schedule


def wide_split_k_fits(m: int, n: int, batches: int, sm_count: int, k: int) -> bool:
    """Long-K problems with too few 128x256 tiles for the SMs: 128x256 tiles split-K in one round (every split unit
    resident, the spread reduction) when (a) that schedule is shorter than 128x128's
    (:meth:`scheduler.Decomposition.time_in_rounds`, a 128x256 tile taking twice as long) and each split keeps >=
    WIDE_SPLIT_MIN_K_FASTER of K, or (b) on a tie, when 128x128 tiles need split-K too, 128x256 gives at least as
    many units and each split keeps >= WIDE_SPLIT_MIN_K of K: the wider tile does the same work with less power
    per clock (451 vs 487 W/GHz at the H200's 700 W cap).

    H200 bf16: (a) 1408x1024x65536 1.02 vs 0.75 of cuBLAS; (b) 1024^2x65536 128x256 + 4 splits +2.2% over 128x128
    + 2 splits; with 8192 of K per split, or where 128x128 tiles need no split, 128x256 ran 1-3% slower."""
    from . import scheduler
    kb = max(1, -(-k // BLOCK_K))
    wide = scheduler.decompose(tile_count(m, n, 256, batches), kb, sm_count, chain=True)   # as measured: 4-split tails
    narrow = scheduler.decompose(tile_count(m, n, 128, batches), kb, sm_count, chain=True)
    if wide.splits < 2 or wide.units - wide.tiles_dp > sm_count:
        return False
    t_wide, t_narrow = 2 * wide.time_in_rounds(sm_count), narrow.time_in_rounds(sm_count)
    if t_wide < t_narrow - 1e-9:
        return k // wide.splits >= WIDE_SPLIT_MIN_K_FASTER
    return (t_wide <= t_narrow + 1e-9 and narrow.splits > 1 and wide.units >= narrow.units
            and k // wide.splits >= WIDE_SPLIT_MIN_K)


PINGPONG_WAVES_K_BLOCKS = {FP16: (96, 32), BF16: (96, 32), TF32: (96, 32), E4M3: (64, 32), E5M2: (64, 32)}
"""choose_block_n, >= 2 waves of 128x256 tiles: ping-pong 128x128 up to (first) this many k-blocks of the kernel A's
input kind when the last wave is at most PINGPONG_WAVES_TAIL full, or (second) however full (16-bit K <= 6144 /
2048, tf32 K <= 3072 / 1024, fp8 K <= 8192 / 4096). H200 out of sample: e4m3 15 of 22 random shapes faster (+5%),
tf32 21 of 21 (+9.5%)."""
PINGPONG_MANY_WAVES = {FP16: 0, BF16: 0, TF32: 8, E4M3: 8, E5M2: 8}
"""choose_block_n, per kernel-A input kind: ping-pong 128x128 from this many waves of 128x256 tiles when K <= 4096
(0: never; kinds not listed 8).  Off for 16-bit inputs, whose short-K shapes keep ping-pong through the other two
bands: on the H200 12 of 16 random 16-bit shapes ran faster without it (+5.9%); tf32 ran 0 of 12 faster without
it."""
PINGPONG_WAVES_TAIL = 0.8
"""choose_block_n's >= 2-waves band: ping-pong up to PINGPONG_WAVES_K_BLOCKS[0] k-blocks when the last wave of
128x256 tiles fills at most this share of the SMs (STREAM_K_TAIL[1], where stream-K stops).  0.9 sent 4096^3 (88%
full) to ping-pong, 2-3% slower."""
PINGPONG_ONE_WAVE_K_BLOCKS = {FP16: 32, BF16: 32, E4M3: 48, E5M2: 48}
"""choose_block_n's one-wave band: between one and two waves of 128x256 tiles whose second fills
PINGPONG_ONE_WAVE_TAIL of the SMs, ping-pong 128x128 up to this many k-blocks of the kernel A's input kind (16-bit
K <= 2048, fp8 K <= 6144; kinds not listed: never, tf32 ran 2 of 6 faster).  H200 out of sample: 16-bit 21 of 23
random shapes faster (+10%), e4m3 26 of 30 (+7.5%)."""
PINGPONG_ONE_WAVE_TAIL = (0.2, 0.8)


WIDE_TILES_FILL = 0.78             # choose_block_n: 128x256 tiles from this share of the SMs given a tile
WIDE_FILL_MIN_K_BLOCKS = {FP16: 8, BF16: 8, E4M3: 12, E5M2: 12, TF32: 64}
"""choose_block_n's nearly-full-wave band (WIDE_TILES_FILL <= 128x256 tiles / SMs < 1): 128x256 from this many
k-blocks of the kernel A's input kind (16-bit K >= 512, fp8 K >= 1536, tf32 K >= 2048; kinds not listed: never).
H200 out of sample: 33 of 36 random shapes faster (+11.5%); 70-78% full and 16-bit K = 256 lost."""
WIDE_FILL_MIN_N = 129
"""... and N at least this: at N <= 128 a 128x256 tile is half empty and gives no fewer tiles than 128x128 (every N =
128 shape measured ran 5-17% slower with it)."""


def choose_block_n(m: int, n: int, batches: int, sm_count: int, k: int | None = None,
                   one_row_narrow: bool = True, wide_split_k: bool = False,
                   waves_max_k: tuple[int, int] = (0, 0), one_wave_max_k: int = 0,
                   wide_fill_min_k: int = 2048, many_waves: int = 8) -> int:
    """The tile width on the kernel's M x N, in this order:

    - 128x64 for N <= 64 (the swap-AB small-M case).
    - 128x256 (cooperative) when its tiles give every SM one, or at least WIDE_TILES_FILL (78%) of them one with K
      >= ``wide_fill_min_k`` (the kind's WIDE_FILL_MIN_K_BLOCKS in elements, 0: never; the default 2048 is for
      direct callers) and N >= WIDE_FILL_MIN_N: 128x128 tiles would run a second, mostly full round, or stream-K
      it, and the wider tile draws less power per FLOP at the 700 W cap.  But 128x128 (ping-pong, which hides the
      epilogues that short mainloops expose) instead:
      - for many waves of short-K tiles: K <= 4096 and >= ``many_waves`` waves of 128x256 tiles (the kind's
        PINGPONG_MANY_WAVES, 0: never);
      - from 2 waves whose last is at most PINGPONG_WAVES_TAIL full with K <= ``waves_max_k[0]``, or with K <=
        ``waves_max_k[1]`` however full (the kind's PINGPONG_WAVES_K_BLOCKS in elements; (0, 0): off): the
        cooperative kernel would split or stream-K the last wave or expose its epilogues, while ping-pong's twice
        as many tiles fill the waves;
      - between one and two waves whose second is PINGPONG_ONE_WAVE_TAIL full with K <= ``one_wave_max_k`` (the
        kind's PINGPONG_ONE_WAVE_K_BLOCKS in elements; 0: off): the cooperative kernel splits that second wave,
        ping-pong's tiles run whole-K.
    - 128x64 over the whole K for one tile row (``one_row_narrow``, not block-scaled fp8;
      :func:`one_row_narrow_fits`): M <= 128 is memory-bound (B is streamed once) and 128x64 tiles that fill >=
      90% of the SMs need no split-K fix-up and keep 8 stages (H200 128x8192x8192: bf16 0.914 vs 0.890 of cuBLAS,
      e4m3 0.991 vs 0.868 of cuBLASLt; cuBLAS runs a 128x64 tile there).  Not for compute-bound shapes: m64n64
      wgmmas read 128 B of shared memory per clock, the SM's whole bandwidth.
    - 128x256 split-K for long-K problems with too few tiles (``wide_split_k``, 16-bit inputs:
      :func:`wide_split_k_fits`).
    - Else 128x128 (ping-pong, see :func:`choose_pingpong`), whose split-K fills the SMs.

    H200, ping-pong against cooperative 128x256: 3072x4096x2048 1.07 vs 0.98 of cuBLAS; nearly whole waves keep
    128x256 (4096^3 0.97 vs 0.98)."""
    if n <= 64:
        return 64
    tiles_256 = tile_count(m, n, 256, batches)
    nearly_full_wave = (tiles_256 >= WIDE_TILES_FILL * sm_count and n >= WIDE_FILL_MIN_N and k is not None
                        and wide_fill_min_k > 0 and k >= wide_fill_min_k)
    if tiles_256 >= sm_count or nearly_full_wave:
        short_k_many_waves = (many_waves > 0 and k is not None and k <= 4096
                              and tiles_256 >= many_waves * sm_count)
        tail = tiles_256 % sm_count
        short_k_waves = (k is not None and tiles_256 >= 2 * sm_count
                         and (k <= waves_max_k[1] or
                              (k <= waves_max_k[0] and 0 < tail <= PINGPONG_WAVES_TAIL * sm_count)))
        one_wave_short_k = (one_wave_max_k > 0 and k is not None and sm_count < tiles_256 < 2 * sm_count
                            and k <= one_wave_max_k
                            and PINGPONG_ONE_WAVE_TAIL[0] * sm_count <= tail <= PINGPONG_ONE_WAVE_TAIL[1] * sm_count)
        return 128 if short_k_many_waves or short_k_waves or one_wave_short_k else 256
    if one_row_narrow and one_row_narrow_fits(m, n, batches, sm_count):
        return 64
    if wide_split_k and k is not None and wide_split_k_fits(m, n, batches, sm_count, k):
        return 256
    return 128


def choose_pingpong(block_n: int, tiles: int | None = None, sm_count: int = 132) -> bool:
    """Ping-pong (consumers alternate tiles, the epilogue of one hidden behind the other's mainloop) for 128x128
    tiles when every CTA gets at least two tiles (``tiles`` >= 2 x SMs); with one unit per CTA the second consumer
    would idle (128x8192x8192: ping-pong 0.855 vs cooperative 0.87-0.88 of cuBLAS).  128x64 (swap-AB) stays
    cooperative (not measured)."""
    return block_n == 128 and (tiles is None or tiles >= 2 * sm_count)


STREAM_K_TAIL = (0.5, 0.8)
"""Stream-K by default when the partial last wave fills more than the first
and at most the second share of the SMs (and at least one full wave runs)."""
STREAM_K_MIN_K_BLOCKS = 48
"""... and K has at least this many k-blocks for 128-wide tiles (0: any K) ..."""
STREAM_K_WIDE_MIN_K_BLOCKS = 96
"""... and this many for 128x256 tiles.  A stream-K partial wave's fix-up costs a tile's traffic per split tile,
which a short mainloop does not hide; below these the rules take whole-K tiles (192-row ones where choose_tall's
model says so) with split-K of a thin last wave. H200 out of sample below 48 k-blocks: 17 of 20 random shapes
faster without stream-K (+19%); at 48-95 k-blocks 128x256 stream-K lost (9 of 10 faster without), 128x128 stream-K
held (1 of 6)."""


STREAM_K_ONE_WAVE_MIN_K_BLOCKS = 0
"""... and with no full wave, 128x256 tiles filling at least WIDE_TILES_FILL of the SMs (choose_block_n's
nearly-full-wave band) run stream-K from this many k-blocks (0: never; measured mixed)."""


def choose_stream_k(streamk, *, block_n: int, tiles: int, sm_count: int, in_kind: int, swap: bool = False,
                    block: bool = False, splits=None, cluster=(1, 1), pingpong=None,
                    k_blocks: int | None = None) -> bool:
    """Stream-K or not: the forced ``_streamk`` when given; otherwise stream-K for 16-bit inputs, cooperative tiles
    (not where ping-pong is forced, or picked by :func:`choose_pingpong` when not forced), no forced split-K or
    cluster, no swap-AB, not block-scaled, when at least one full wave runs and the partial last wave holds more
    than half (below that, split-K of the last wave fills the SMs, see scheduler.decompose) and at most 80% of the
    SMs, and K has at least STREAM_K_MIN_K_BLOCKS (48, 128-wide tiles) or STREAM_K_WIDE_MIN_K_BLOCKS (96, 128x256)
    k-blocks; with no full wave only where STREAM_K_ONE_WAVE_MIN_K_BLOCKS is set (off).

    H200 bf16, stream-K time / default time per round: 8192^3 1.012 faster (last wave 52% of the SMs),
    1792x3840x8192 1.17 (59% after one full wave: data-parallel left 54 SMs idle for a whole tile).  Slower at
    4096^3 (88%), with no full wave, and wherever few tiles run long K (1024x1024x65536 0.68, M <= 128 0.88-0.94:
    CTAs at different K offsets of one tile row no longer share A and B through L2).  fp8 and tf32 are not
    measured: off."""
    if streamk is not None:
        return bool(streamk)
    pingpong = pingpong if pingpong is not None else choose_pingpong(block_n, tiles, sm_count)
    if in_kind not in (FP16, BF16) or swap or block or splits is not None or tuple(cluster) != (1, 1) or pingpong:
        return False
    if k_blocks is not None and k_blocks < (STREAM_K_WIDE_MIN_K_BLOCKS if block_n > 128 else STREAM_K_MIN_K_BLOCKS):
        return False
    full_waves, tail = divmod(tiles, sm_count)
    if (full_waves == 0 and STREAM_K_ONE_WAVE_MIN_K_BLOCKS > 0 and block_n > 128 and k_blocks is not None
            and k_blocks >= STREAM_K_ONE_WAVE_MIN_K_BLOCKS and tiles >= WIDE_TILES_FILL * sm_count):
        return True
    return full_waves >= 1 and STREAM_K_TAIL[0] * sm_count < tail <= STREAM_K_TAIL[1] * sm_count


CLUSTER_SPLIT_MIN_K = 4096         # choose_cluster: one-round split-K gets 1x2 clusters from this K per split
CLUSTER_MIN_SPLITS = 4             # ... and this many splits


def choose_cluster(cluster, *, m: int, n: int, k: int, batches: int, sm_count: int, block_n: int, in_kind: int,
                   swap: bool = False, block: bool = False, splits=None, pingpong=None, streamk=None
                   ) -> tuple[int, int]:
    """The cluster as (cluster_m, cluster_n): the forced ``_cluster`` when given; otherwise, for a 16-bit or
    per-tensor fp8 problem of 128x128 cooperative tiles (no swap-AB, not block-scaled, one batch, no forced split,
    ping-pong or stream-K) run as split-K in one round (no full wave of tiles, :func:`scheduler.decompose`) with
    at least CLUSTER_MIN_SPLITS splits of at least CLUSTER_SPLIT_MIN_K of K each: (1, 2), CTA pairs on
    horizontally adjacent tiles sharing the A tile by TMA multicast, when the tile columns are even, else (2, 1),
    pairs on vertically adjacent tiles sharing B, when the tile rows are even (no idle half-pairs either way);
    else no cluster.  There every CTA streams its K range at the tensor cores' rate and L2 -> SM traffic is the
    limit (ncu, 512x512x65536: L2 71% busy, 550 MB moved against the 331 MB of cuBLAS, which runs 2x1 clusters
    there); pairs sharing A move a quarter less.

    H200, ratio to cuBLAS without / with the cluster: bf16 512x512x65536 0.75 / 0.89, 512x1024x32768 0.76 / 0.95,
    2x1 at 512x384x65536 0.63 / 0.82; e4m3 1x2 +10% to +25% in TFLOP/s.  Neutral or slower under 4096 of K per
    split, at 3 splits, on 128x256 tiles and on full waves; 2x1 over an odd number of tile rows (idle half-pairs)
    -18% to -24%."""
    if cluster is not None:
        return cluster_dims(cluster)
    from . import scheduler
    if (in_kind not in (FP16, BF16, E4M3, E5M2) or swap or block or batches != 1 or block_n != 128
            or splits is not None or pingpong or streamk):
        return 1, 1
    tiles_m, tiles_n = scheduler.cdiv(m, BLOCK_M), scheduler.cdiv(n, block_n)
    if tiles_m % 2 and tiles_n % 2:
        return 1, 1
    dec = scheduler.decompose(tiles_m * tiles_n, scheduler.cdiv(k, block_k_of(in_kind)), sm_count)
    if dec.tiles_dp or dec.splits < CLUSTER_MIN_SPLITS or k // dec.splits < CLUSTER_SPLIT_MIN_K:
        return 1, 1
    return (1, 2) if tiles_n % 2 == 0 else (2, 1)


MISALIGNED_PITCH_KINDS = (FP16, BF16, TF32, E4M3, E5M2)
"""Input kinds for which :func:`misaligned_pitch_config` applies (its rule switch: () turns it off)."""
MISALIGNED_PITCH_MIN_N = 512
"""misaligned_pitch_config: N of at least this (the narrowest measured; a narrow N keeps its 128x64 or
128x128 tiles, which a 256-wide tile would mostly pad: N <= 64 problems are memory-bound on a)."""
MISALIGNED_PITCH_MIN_FILL = 0.5
"""misaligned_pitch_config: only where the 128x256 tiles outnumber this share of the SMs (0: any count).  With fewer
the loads do not saturate L2, the rule's premise, and the other rules' smaller tiles spread the work over more
SMs.  H200 out of sample: 15 of 18 random shapes faster, +10.7%."""
MISALIGNED_PITCH_MOD = 32
"""An operand's pitch (bytes between the lines TMA loads: rows of a K-major operand, K-rows of an
MN-major one) is misaligned when ``pitch % MISALIGNED_PITCH_MOD == MISALIGNED_PITCH_MOD // 2``: every
other 128-byte box line then starts 16 bytes into a 32-byte L2 sector and straddles two 128-byte lines."""


def contiguous_pitches(m: int, n: int, k: int, kinds: tuple[int, int], kmajor: tuple[bool, bool]) -> tuple[int, int]:
    """(a, b) pitches in bytes of contiguous operands (a M x K, b K x N): the extent of the other axis
    than the contiguous one times the element size - K for K-major a and b, M for an MN-major a, N for an
    MN-major b."""
    a = (k if kmajor[0] else m) * ELEMENT_BYTES[kinds[0]]
    b = (k if kmajor[1] else n) * ELEMENT_BYTES[kinds[1]]
    return a, b


def misaligned_pitch(pitch: int) -> bool:
    """Whether TMA's box lines at this pitch (bytes) start at an odd multiple of 16 bytes every other line."""
    return pitch % MISALIGNED_PITCH_MOD == MISALIGNED_PITCH_MOD // 2


def misaligned_pitch_config(m: int, n: int, batch: int, sm_count: int, *, kinds: tuple[int, int],
                            pitches: tuple[int, int], swap: bool, block: bool) -> bool:
    """Whether an un-forced problem takes 128x256 tiles in 2x1 clusters because an operand's pitch is misaligned
    (:func:`misaligned_pitch`): every input kind (MISALIGNED_PITCH_KINDS), not block-scaled, not swap-AB, one
    batch, more than one tile row, N >= MISALIGNED_PITCH_MIN_N, more 128x256 tiles than MISALIGNED_PITCH_MIN_FILL
    x ``sm_count`` (plan_config asks only where choose_cluster chose no cluster).  With such a pitch the loads
    cost L2 about three times the requests (ncu, bf16 5416x6280x1400 TN, the 128x128 ping-pong plan: 30.3 M L2
    requests, 51.7 M sectors, L2 86% busy, 227 us, against 10.4 M / 37.2 M / 63% / 167 us at K = 1408), so the
    schedule becomes L2-bound; 128x256 tiles whose 2x1 pair shares B by multicast ask L2 for half the lines per
    FLOP that 128x128 tiles do.  H200: bf16 TN, 20 shapes with K = 8 mod 16, 0.880 -> 1.068 of cuBLAS (geomean);
    out of sample fp16/bf16 in all four layouts 18 of 19 faster (+26%), e4m3 and tf32 9 of 9 (+37%)."""
    if kinds[0] not in MISALIGNED_PITCH_KINDS or kinds[1] not in MISALIGNED_PITCH_KINDS:
        return False
    if block or swap or batch != 1 or m <= BLOCK_M or n < MISALIGNED_PITCH_MIN_N:
        return False
    if tile_count(m, n, 256, 1) <= MISALIGNED_PITCH_MIN_FILL * sm_count:
        return False
    return misaligned_pitch(pitches[0]) or misaligned_pitch(pitches[1])


MISALIGNED_SHORT_K_TALL_K_BLOCKS = {FP16: 16, BF16: 16, TF32: 16, E4M3: 16, E5M2: 16}
"""plan_config: below this many k-blocks of K (per input kind; a kind not here: never; 16 for all: K < 1024 for
16-bit, < 512 for tf32, < 2048 for fp8 inputs) the misaligned-pitch rule (:func:`misaligned_pitch_config`) yields
to the plan the other rules make where that plan is 192x128 tiles.  At short K a 128x256 pair runs few k-blocks
per tile and its large epilogue is exposed; the 192x128 plan (choose_tall's, for problems with few 128x128 tiles)
has more tiles for the SMs and a smaller epilogue, and the pitch's extra L2 traffic matters less with so little
mainloop.  The bound is a count of k-blocks, not K: it held for every element width.  H200 out of sample:
fp16/bf16 31 of 32 random shapes faster (+12.2%, +10.5%), not at K 1024-2048 (8 of 16); e4m3 73 of 96 (+2% to
+6%), not at 16-32 k-blocks (2 of 16); tf32 28 of 32 (+6.0%, +9.3%)."""


def misaligned_short_k_tall(k: int, kinds: tuple[int, int]) -> bool:
    """Whether a misaligned-pitch problem first asks for the plan without the rule (its 192x128 plan wins,
    MISALIGNED_SHORT_K_TALL_K_BLOCKS: both kinds listed, K under the fewer of their k-block ceilings)."""
    if kinds[0] not in MISALIGNED_SHORT_K_TALL_K_BLOCKS or kinds[1] not in MISALIGNED_SHORT_K_TALL_K_BLOCKS:
        return False
    blocks = min(MISALIGNED_SHORT_K_TALL_K_BLOCKS[kinds[0]], MISALIGNED_SHORT_K_TALL_K_BLOCKS[kinds[1]])
    return k < blocks * block_k_of(kinds[0])


MISALIGNED_TALL_RATIO = 0.9
"""misaligned_tall_fits: 192x192 tiles instead of the misaligned-pitch rule's 128x256 2x1 when the
schedule model gives them at most this share of its time (0: never); MISALIGNED_TALL_RATIO_MN_MAJOR where
an operand is MN-major."""
MISALIGNED_TALL_PAIRED = True
"""misaligned_tall_fits: price the 128x256 side as the 2x1 pairs it runs (:func:`pair_rounds` on sm_count // 2
cluster slots, the split-tail term, x the tile's area) rather than as single 128x256 tiles on every SM (False),
where the 192x192 tiles fit one round (MISALIGNED_TALL_PAIRED_ONE_ROUND); not where narrow pairs would then
replace the 192x192 tiles (plan_config keeps the pairs' own choice there).  H200 out of sample: 12 of 16 random
shapes faster, +14.2%."""
MISALIGNED_TALL_PAIRED_ONE_ROUND = True
"""... only where the 192x192 tiles fit one round (at most ``sm_count``; False: any count).  Measured by the 192x192
plan it moved to: one data-parallel round 6 of 6 faster (+8% to +19%), more rounds 9 of 13, a split-K tail 4 of
12."""
MISALIGNED_TALL_RATIO_MN_MAJOR = 1.0
"""misaligned_tall_fits' ratio where an operand is MN-major.  H200: 1.0 ran 13 of 16 random NN/NT/TT shapes faster
out of sample (+10.9%), but TN (both K-major) only 1 of 6, which keeps MISALIGNED_TALL_RATIO."""


def misaligned_tall_fits(m: int, n: int, k: int, sm_count: int, *, block_k: int = BLOCK_K,
                         mn_major: bool = False, paired: bool | None = None) -> bool:
    """Whether a problem that takes the misaligned-pitch rule (:func:`misaligned_pitch_config`) runs 192x192 tiles
    (cooperative, data-parallel or split-K, no cluster) instead of 128x256 in 2x1 clusters: M >= TALL_MIN_M and
    :func:`schedule_cost` of 192x192 at most MISALIGNED_TALL_RATIO (0.9; ``mn_major``, an operand MN-major:
    MISALIGNED_TALL_RATIO_MN_MAJOR, 1.0) of 128x256's - where 128x256 tiles quantise into a partly empty last
    round that 192x192 ones fill (e.g. 552x7768x648: 5 x 31 = 155 pairs of 128x256 tiles, 2.3 rounds of 66
    clusters; 3 x 41 = 123 192x192 tiles, one round).  ``paired``: price the 128x256 side as pairs
    (MISALIGNED_TALL_PAIRED, None: that setting) where the 192x192 tiles fit one round (..._ONE_ROUND).

    H200 fp16 TN, on shapes the rule loses: at model ratio 0.63 192x192 ran +16% to +44% over the rule, at 0.95
    -12%.  192x128 tiles are not taken here (at 400x5560x3448 they ran 29% slower than the rule)."""
    ratio = MISALIGNED_TALL_RATIO_MN_MAJOR if mn_major else MISALIGNED_TALL_RATIO
    if ratio <= 0 or m < TALL_MIN_M:
        return False
    paired = ((MISALIGNED_TALL_PAIRED if paired is None else paired)
              and (not MISALIGNED_TALL_PAIRED_ONE_ROUND or tile_count(m, n, 192, 1, TALL_BLOCK_M) <= sm_count))
    if paired:                      # the pairs as the cluster kernel runs them, x one tile's area
        wide = pair_rounds(m, n, k, sm_count, 256, block_k) * BLOCK_M * 256
    else:
        wide = schedule_cost(m, n, k, sm_count, BLOCK_M, 256, block_k=block_k)
    tall = schedule_cost(m, n, k, sm_count, TALL_BLOCK_M, 192, block_k=block_k)
    return tall <= ratio * wide


MISALIGNED_WIDTH_192_RATIO = 1.0
"""misaligned_width_192_fits: 128x192 tiles in 2x1 clusters instead of the misaligned-pitch rule's 128x256 ones where
192-wide columns pad N by more than WIDTH_192_MIN_PAD_GAIN x N less and the schedule model gives them at most this
share of 128x256's time (0: never), from K = MISALIGNED_WIDTH_192_MIN_K (shorter K ran 1 of 5 faster).  H200 out
of sample: 10 of 16 random shapes faster, +8.7%."""
MISALIGNED_WIDTH_192_MIN_K = 2048


def misaligned_width_192_fits(wide: GemmConfig, m: int, n: int, k: int, sm_count: int) -> bool:
    """Whether a problem that takes the misaligned-pitch rule's 128x256 pairs ``wide`` (not its 192x192
    tiles) runs 128x192 tiles in 2x1 clusters instead: 16-bit inputs, K-major B (a 2x1 pair of N-major
    192-wide B tiles cannot split its three 64-column atoms), see MISALIGNED_WIDTH_192_RATIO."""
    if (MISALIGNED_WIDTH_192_RATIO <= 0 or not wide.b_kmajor
            or ELEMENT_BYTES[wide.in_kind] != 2 or ELEMENT_BYTES[wide.b_kind] != 2
            or k < MISALIGNED_WIDTH_192_MIN_K or not width_192_pads_less(n)):
        return False
    cost_256 = schedule_cost(m, n, k, sm_count, BLOCK_M, 256, block_k=wide.block_k)
    cost_192 = schedule_cost(m, n, k, sm_count, BLOCK_M, 192, block_k=wide.block_k)
    return cost_192 <= MISALIGNED_WIDTH_192_RATIO * cost_256


MISALIGNED_NARROW_RATIO = 0.95
"""misaligned_narrow_width: a 128xW tile between the multiples of 64 (NARROW_RULE_NS) in the misaligned-pitch rule's
2x1 pairs instead of its 128x256 / 128x192 ones when the pairs' load model (:func:`pair_schedule_cost`) gives the
best such width at most this share of the cheaper of the chosen and 128x256 pairs' time (0: never), from K =
MISALIGNED_NARROW_MIN_K and M > MISALIGNED_NARROW_MAX_ROWS_OFF x 128.  The pairs are L2-bound, so narrower tiles
pay for their extra A loads; an area model did worse (14 of 20 faster, +3.2%).  H200 out of sample: 15 of 20
random shapes faster, +6.9%."""
MISALIGNED_NARROW_MIN_K = 1024
MISALIGNED_NARROW_OVER_TALL = True
"""plan_config: where misaligned_tall_fits takes 192x192 tiles, narrow pairs (misaligned_narrow_width against 128x256
pairs) instead when that rule gives a width (False: never). H200 out of sample: 12 of 16 random shapes faster,
+4.9%."""
MISALIGNED_NARROW_OVER_TALL_MIN_M = 1024
"""... and M above this (0: any): with M <= 1024 the narrow pairs lost to the 192x192 tiles they replaced on 7 of 10
measured rows, with M > 1024 they won all 9. H200 out of sample: 8 of 12 random shapes faster with the limit,
+9.8%."""
MISALIGNED_NARROW_MAX_ROWS_OFF = 3
"""misaligned_narrow_width: not with this many tile rows or fewer (M <= 384)."""


def pair_schedule_cost(m: int, n: int, k: int, sm_count: int, block_n: int, block_k: int = BLOCK_K) -> float:
    """The misaligned-pitch model of 128x``block_n`` tiles in 2x1 clusters: rounds of pairs of vertically
    adjacent tiles (the tile rows rounded up to an even count, as the cluster kernel's scheduler walks them)
    on ``sm_count // 2`` cluster slots (:meth:`scheduler.Decomposition.time_in_rounds`, the split-tail
    term), x the lines a pair loads per k-block (2 x 128 of A, ``block_n`` of B multicast): where a pitch
    is misaligned the schedule is L2-bound (misaligned_pitch_config), so a pair's time follows its
    loads, not its area."""
    return pair_rounds(m, n, k, sm_count, block_n, block_k) * (2 * BLOCK_M + block_n)


def pair_rounds(m: int, n: int, k: int, sm_count: int, block_n: int, block_k: int = BLOCK_K,
                cluster: tuple[int, int] = (2, 1)) -> float:
    """Rounds of 2x1 pairs of 128x``block_n`` tiles (the tile rows rounded up to an even count, as the
    cluster kernel's scheduler walks them; ``cluster`` (1, 2): pairs of horizontally adjacent tiles, the
    tile columns rounded up) on ``sm_count // 2`` cluster slots, with the split-tail term
    (:func:`split_rounds`): pair_schedule_cost's and MISALIGNED_TALL_PAIRED's schedule of the pairs."""
    from .scheduler import cdiv
    cm, cn = cluster
    units = cdiv(cdiv(m, BLOCK_M), cm) * cdiv(cdiv(n, block_n), cn)
    return split_rounds(units, cdiv(k, block_k), sm_count // 2, SPLIT_TAIL_OVERHEAD)


MISALIGNED_PAIR_1X2_RATIO = 0.9
"""plan_config: the misaligned-pitch rule's 128x256 pairs (:func:`misaligned_pitch_config`, where its width choices
keep 256) run as 1x2 clusters (horizontally adjacent tiles sharing A by multicast) instead of 2x1 where their
schedule (:func:`pair_rounds`) is at most this share of the 2x1 pairs' (0: never).  2x1 pairs share B, the larger
tile operand, so they ask L2 for fewer lines per FLOP (2 x 128 + W per pair and k-block against 128 + 2 x W), the
rule's premise; but an odd tile-row count leaves half-empty pairs in the last pair row, and where that pushes the
pairs past the cluster slots the 1x2 ones finish a round earlier.  Fitted on the stored oracle rows (the 8 at this
ratio <= 0.9 all ran 1x2 faster, +8.3%).  H200 out of sample: fp16/bf16 in four layouts 27 of 31 random shapes
faster (+10.9%, +15.0%; +40% to +52% with three tile rows), e4m3 8 of 12 (+6.0%); tf32 ran 5 of 8 (+4.8%) and
keeps its 2x1 pairs (MISALIGNED_PAIR_1X2_KINDS)."""
MISALIGNED_PAIR_1X2_KINDS = (FP16, BF16, E4M3, E5M2)
"""... the input kinds it applies to (both a's and b's; e5m2 and mixed fp8 run e4m3's kernels and bytes)."""


def misaligned_pair_1x2(pair: GemmConfig, m: int, n: int, k: int, sm_count: int) -> bool:
    """Whether the misaligned-pitch rule's 2x1 pairs ``pair`` run as 1x2 pairs instead (see
    MISALIGNED_PAIR_1X2_RATIO): the same 128x256 tile of a kind in MISALIGNED_PAIR_1X2_KINDS, its 1x2
    schedule at most that share of the 2x1 one's."""
    if (MISALIGNED_PAIR_1X2_RATIO <= 0 or pair.cluster != (2, 1) or pair.block_n != 256
            or pair.in_kind not in MISALIGNED_PAIR_1X2_KINDS or pair.b_kind not in MISALIGNED_PAIR_1X2_KINDS):
        return False
    rounds = [pair_rounds(m, n, k, sm_count, pair.block_n, pair.block_k, c) for c in ((2, 1), (1, 2))]
    return rounds[1] <= MISALIGNED_PAIR_1X2_RATIO * rounds[0]


def misaligned_narrow_width(pair: GemmConfig, m: int, n: int, k: int, sm_count: int) -> int | None:
    """The width W (NARROW_RULE_NS) of 128xW tiles in 2x1 clusters to run instead of the misaligned-pitch
    rule's 128x256 or 128x192 pairs ``pair`` (a 2x1 GemmConfig), or None: 16-bit inputs, K-major B and
    row-major D (the narrow kernels'), K >= MISALIGNED_NARROW_MIN_K, among the widths whose columns pad N
    no more than 256-wide ones the least modelled schedule, if at most MISALIGNED_NARROW_RATIO of the
    cheaper of ``pair``'s and 128x256 pairs' (a 128x192 ``pair`` was chosen by area, which the load model
    may price above 128x256: 7456x1688x9784 ran 192 2x1 +8.7% and 256 2x1 +8.4% over the 224 pairs
    that a comparison with 192 alone picked; see MISALIGNED_NARROW_RATIO)."""
    if (MISALIGNED_NARROW_RATIO <= 0 or not pair.b_kmajor or pair.d_colmajor or pair.in_bytes != 2
            or k < MISALIGNED_NARROW_MIN_K or m <= MISALIGNED_NARROW_MAX_ROWS_OFF * BLOCK_M):
        return None
    # against the pair's width and 128x256 pairs both (misaligned_width_192_fits prices 192 by area)
    base = min(pair_schedule_cost(m, n, k, sm_count, w, pair.block_k) for w in {pair.block_n, 256})
    costs = [(pair_schedule_cost(m, n, k, sm_count, w, pair.block_k), w)
             for w in NARROW_RULE_NS if padded(n, w) <= padded(n, 256)]
    best = min(costs, default=None)
    return best[1] if best is not None and best[0] <= MISALIGNED_NARROW_RATIO * base else None


def plan_config(m: int, n: int, k: int, batch: int, sm_count: int, *, kinds: tuple[int, int],
                kmajor: tuple[bool, bool], out_name: str, use_c: bool, c_rowmajor: bool, bias_kind: int,
                activation, block: bool, block_n=None, swap=None, cluster=None, splits=None, pingpong=None,
                streamk=None, block_m=None, pitches: tuple[int, int] | None = None,
                misaligned_rule: bool = True) -> GemmConfig:
    """The kernel configuration for a validated problem (the user's M x N x K,
    ``kinds``/``kmajor`` of a and b) and the forced ``_`` options (None: the
    rules choose), in this order: with nothing forced, the paired one-row
    arrangement where it fits (:func:`one_row_pair_fits`: swap-AB, 128x64
    tiles, 1x2 clusters); swap-AB (:func:`choose_swap`), tile width
    (:func:`choose_block_n`, at most 128 block-scaled), cluster (:func:`choose_cluster`), stream-K
    (:func:`choose_stream_k`), ping-pong (:func:`choose_pingpong`); then,
    with nothing forced (``block_m`` included), 128x192 tiles instead of
    128x256 where :func:`choose_width_192` says so, 192-row tiles instead where
    :func:`choose_tall` says so, and the swapped orientation instead where
    :func:`swap_waves_limit` and :func:`config_cost` say so, a narrow width where
    :func:`choose_narrow_width` says so, and 2x1 clusters for NN 128x128 where
    :func:`mn_major_a_pairs_fit` says so.  Raises
    ValueError for forced options that no kernel combines.  One function for
    rawcoop.gemm's plan and the fuzzer's oracle.  The configuration's
    ``d_colmajor`` says whether it runs swap-AB (then its kernel M, N and
    operands are the user's N, M, b, a).  ``block_m=192`` (forced only):
    192-row tiles, 192 wide unless ``block_n`` says 128, cooperative and
    data-parallel or split-K (no cluster, stream-K or ping-pong).
    ``pitches``: a's and b's pitches in bytes (None: contiguous operands,
    :func:`contiguous_pitches`); a misaligned one (:func:`misaligned_pitch_config`: where
    128x256 tiles outnumber MISALIGNED_PITCH_MIN_FILL of the SMs) takes 128x256 tiles in 2x1 clusters
    where choose_cluster gave none, before the tile rules - or 192x192 tiles where
    :func:`misaligned_tall_fits` (its own ratio with an MN-major operand), or 128x192 pairs where
    :func:`misaligned_width_192_fits`, then pairs of a width between the multiples of 64 where
    :func:`misaligned_narrow_width`, and 128x256 pairs in 1x2 clusters instead where
    :func:`misaligned_pair_1x2`; but first, at short K (:func:`misaligned_short_k_tall`), the
    plan without that rule where it is 192x128.  ``misaligned_rule=False`` plans as if no pitch were
    misaligned (that fallback's own call)."""
    if block_m is not None and block_m != BLOCK_M:
        return _tall_config(m, n, k, batch, sm_count, kinds=kinds, kmajor=kmajor, out_name=out_name, use_c=use_c,
                            c_rowmajor=c_rowmajor, bias_kind=bias_kind, activation=activation, block=block,
                            block_m=block_m, block_n=block_n, swap=swap, cluster=cluster, pingpong=pingpong,
                            streamk=streamk)
    if block and swap:
        raise ValueError("_swap=True: block-scaled fp8 has no swap-AB kernel (a's per-row scales would become "
                         "per-column scales of the kernel's B, b's 128-row blocks per-row-block ones); small M "
                         "runs un-swapped")
    out_fp32 = out_name == "float32"
    nothing_forced = all(x is None for x in (swap, block_n, cluster, splits, pingpong, streamk))
    paired = (nothing_forced
              and not out_fp32 and swap_buildable(block=block) and kinds[0] == kinds[1]
              and one_row_pair_fits(m, n, k, batch, sm_count, in_kind=kinds[0], a_kmajor=kmajor[0]))
    if paired:
        swap, block_n, cluster = True, 64, (1, 2)          # the paired one-row arrangement
    swap = choose_swap(swap, m, n, batch, sm_count, out_fp32=out_fp32, block=block)
    km, kn = (n, m) if swap else (m, n)
    kind_a = kinds[1] if swap else kinds[0]           # the kernel's A (see _kernel_config)
    if block and block_n is not None and block_n not in BLOCK_SCALED_NS:
        raise ValueError(f"_block_n must be one of {BLOCK_SCALED_NS} for block-scaled fp8 (a tile inside one "
                         f"128-column scale block; accumulators + promotion temporaries in 128 registers), "
                         f"got {block_n}")
    forced_block_n = block_n
    ping_pong_free = pingpong is not False and streamk is None and splits is None and cluster is None
    ping_pong_rules = ping_pong_free and not block          # the ping-pong tile rules may apply
    bk = block_k_of(kind_a)
    waves_k_blocks = PINGPONG_WAVES_K_BLOCKS.get(kind_a, (0, 0)) if ping_pong_rules else (0, 0)
    block_n = block_n or choose_block_n(km, kn, batch, sm_count, k, one_row_narrow=not block,
                                        wide_split_k=kind_a in (FP16, BF16) and not pingpong,
                                        waves_max_k=(waves_k_blocks[0] * bk, waves_k_blocks[1] * bk),
                                        one_wave_max_k=(PINGPONG_ONE_WAVE_K_BLOCKS.get(kind_a, 0) * bk
                                                        if ping_pong_rules else 0),
                                        wide_fill_min_k=WIDE_FILL_MIN_K_BLOCKS.get(kind_a, 0) * bk,
                                        many_waves=PINGPONG_MANY_WAVES.get(kind_a, 8))
    if block:
        block_n = min(block_n, 128)             # 128x256 is not built block-scaled
    if ELEMENT_BYTES[kind_a] != 2 and block_n not in BLOCK_NS:
        raise ValueError(f"_block_n must be one of {BLOCK_NS} for {KIND_NAMES[kind_a]} inputs, got "
                         f"{forced_block_n}")
    cluster_m, cluster_n = choose_cluster(cluster, m=km, n=kn, k=k, batches=batch, sm_count=sm_count,
                                          block_n=block_n, in_kind=kind_a, swap=swap, block=block, splits=splits,
                                          pingpong=pingpong, streamk=streamk)      # forced 2 means (2, 1)
    if cluster_m == 2 and block_n < 128:
        raise ValueError(f"_cluster={cluster!r} (2x1: B multicast) needs 128- or 256-wide tiles; got {block_n}")
    if (misaligned_rule and nothing_forced and not paired and (cluster_m, cluster_n) == (1, 1)
            and misaligned_pitch_config(m, n, batch, sm_count, kinds=kinds, swap=swap, block=block,
                                        pitches=pitches or contiguous_pitches(m, n, k, kinds, kmajor))):
        if misaligned_short_k_tall(k, kinds):
            plain = plan_config(m, n, k, batch, sm_count, kinds=kinds, kmajor=kmajor, out_name=out_name,
                                use_c=use_c, c_rowmajor=c_rowmajor, bias_kind=bias_kind, activation=activation,
                                block=block, pitches=pitches, misaligned_rule=False)
            if (plain.block_m, plain.block_n) == (192, 128):
                return plain
        wide = _kernel_config(256, False, kinds, kmajor, out_name, use_c, c_rowmajor, bias_kind, activation,
                              cluster_m=2, pingpong=False, cluster_n=1, scale_mode=0, stream_k=False)
        tall_kw = dict(block_k=wide.block_k, mn_major=not all(kmajor))
        tall = misaligned_tall_fits(m, n, k, sm_count, paired=False, **tall_kw)
        if tall or (MISALIGNED_TALL_PAIRED and misaligned_tall_fits(m, n, k, sm_count, paired=True, **tall_kw)):
            narrow_n = (misaligned_narrow_width(wide, m, n, k, sm_count)
                        if MISALIGNED_NARROW_OVER_TALL and m > MISALIGNED_NARROW_OVER_TALL_MIN_M else None)
            if not narrow_n:
                return as_tall(wide, 192)
            if tall:
                return with_tile(wide, narrow_n)
            # 192x192 only by the pairs' price, and narrow pairs would replace it: the pairs' own choice
            # below, as without MISALIGNED_TALL_PAIRED (through here the pairs' price moved 192 pairs to
            # 208 / 176 ones: -5% to -6% on three of four measured shapes)
        if misaligned_width_192_fits(wide, m, n, k, sm_count):
            wide = with_tile(wide, 192)
        narrow_n = misaligned_narrow_width(wide, m, n, k, sm_count)
        pair = with_tile(wide, narrow_n) if narrow_n else wide       # (as many stages as the width fits)
        if misaligned_pair_1x2(pair, m, n, k, sm_count):
            pair = replace(pair, cluster_m=1, cluster_n=2)             # the same tile, A shared instead of B
        return pair
    if streamk and (splits is not None or (cluster_m, cluster_n) != (1, 1) or (pingpong and block)):
        raise ValueError("_streamk=True: stream-K kernels are without clusters, take no _splits and are not "
                         f"ping-pong block-scaled (got _splits={splits!r}, _cluster={cluster!r}, "
                         f"_pingpong={pingpong!r}, block-scaled={bool(block)})")
    from . import scheduler
    tiles = tile_count(km, kn, block_n, batch)
    stream_k = choose_stream_k(streamk, block_n=block_n, tiles=tiles, sm_count=sm_count, in_kind=kind_a,
                               swap=swap, block=block, splits=splits, cluster=(cluster_m, cluster_n),
                               pingpong=pingpong, k_blocks=scheduler.cdiv(k, bk))
    pingpong = (bool(pingpong) if pingpong is not None else
                not block and not stream_k and choose_pingpong(block_n, tiles, sm_count))
    if pingpong and block_n > 128:
        raise ValueError(f"_pingpong needs a tile of at most 128 columns, got {block_n}")
    if pingpong and block and block_n != 64:
        raise ValueError(f"_pingpong with block-scaled fp8 needs _block_n=64 (two 64-row halves of accumulators "
                         f"and promotion temporaries per consumer must fit in 128 registers), got {block_n}")
    cfg = _kernel_config(block_n, swap, kinds, kmajor, out_name, use_c, c_rowmajor, bias_kind, activation,
                         cluster_m=cluster_m, pingpong=pingpong, cluster_n=cluster_n, scale_mode=int(block),
                         stream_k=stream_k)
    if cfg.cluster_m == 2 and cfg.block_n % 128 and not cfg.b_kmajor:
        raise ValueError(f"_cluster={cluster!r} (2x1: the pair splits B's tile into halves of whole 64-column "
                         f"atoms) with _block_n={block_n} needs the kernel's B K-major; "
                         f"{'a' if swap else 'b'} is {'M' if swap else 'N'}-major here (use _block_n 128 or 256)")
    if paired and not use_c:
        # One tile per CTA (one_row_narrow_fits; gemm falls back where fewer clusters are resident):
        # the staging buffers can live in the ring, which then holds 9 stages instead of 8.
        cfg = replace(cfg, epi_ring=True, stages=0)
    if block_m is None and nothing_forced and not paired:
        # 128x192 tiles where they pad N less and their modelled schedule is no longer (choose_width_192)
        narrow = choose_width_192(cfg, lambda: plan_config(
            m, n, k, batch, sm_count, kinds=kinds, kmajor=kmajor, out_name=out_name, use_c=use_c,
            c_rowmajor=c_rowmajor, bias_kind=bias_kind, activation=activation, block=block, block_n=192, swap=swap,
            pitches=pitches), km, kn, k, sm_count)
        if narrow is not None:
            cfg, tiles = narrow, tile_count(km, kn, narrow.block_n, batch)
    if block_m is None and nothing_forced:
        # A stream-K choice with no full wave (STREAM_K_ONE_WAVE_MIN_K_BLOCKS) does not stand against tall
        # tiles: choose_tall weighs the data-parallel plan it replaced (192x128 over it ran 10-41% faster)
        one_wave_sk = cfg.stream_k and tiles < sm_count
        tall_n = choose_tall(replace(cfg, stream_k=False) if one_wave_sk else cfg, km, kn, k, batch, sm_count)
        if tall_n is not None:
            cfg = as_tall(cfg, tall_n)
        limit = swap_waves_limit(cfg, m, n, batch, kinds=kinds, out_fp32=out_fp32, block=block)
        if limit:
            swapped = plan_config(m, n, k, batch, sm_count, kinds=kinds, kmajor=kmajor, out_name=out_name,
                                  use_c=use_c, c_rowmajor=c_rowmajor, bias_kind=bias_kind, activation=activation,
                                  block=block, swap=True)
            if (not swap_adds_area(cfg, swapped, m, n)
                    and config_cost(swapped, m, n, k, sm_count) <= limit * config_cost(cfg, m, n, k, sm_count)):
                return swapped
        # Last, where the plan is still a 128x256 / 128x192 tile, a 192x128 one or a long-K 128x128 one: a
        # width whose tile count fills the rounds better (choose_narrow_width; never in place of a swap)
        narrow = choose_narrow_width(cfg, lambda w, streamk=None: plan_config(
            m, n, k, batch, sm_count, kinds=kinds, kmajor=kmajor, out_name=out_name, use_c=use_c,
            c_rowmajor=c_rowmajor, bias_kind=bias_kind, activation=activation, block=block, block_n=w, swap=swap,
            streamk=streamk, pitches=pitches), km, kn, k, sm_count)
        if narrow is not None:
            return narrow
        if batch == 1 and mn_major_a_pairs_fit(cfg, m, kmajor):
            return plan_config(m, n, k, batch, sm_count, kinds=kinds, kmajor=kmajor, out_name=out_name,
                               use_c=use_c, c_rowmajor=c_rowmajor, bias_kind=bias_kind, activation=activation,
                               block=block, block_n=128, swap=False, cluster=(2, 1), pingpong=False,
                               pitches=pitches)
    return cfg


CLUSTER_MN_MAJOR_A_MIN_M = 1536
"""mn_major_a_pairs_fit: 128x128 tiles with an M-major a and a K-major b (the NN layout) run in 2x1 clusters
(vertically adjacent tiles sharing B by multicast) from M = this (0: never), over an even number of tile rows (an
odd count leaves an idle half-pair: 3 of 7 faster).  The stored oracle rows had 6 of 7 NN rows from M = 1536
faster paired, 6 of 15 below.  H200 out of sample: 11 of 16 random NN shapes faster (+4.3%; +1.2% with the
even-rows condition, 11 of 16)."""
CLUSTER_MN_MAJOR_A_ODD_MIN_ROWS = 0
"""... and over an odd number of tile rows from this many (0: never): one idle half-pair in that many rows.  Off:
mixed at every K on the H200 (7 of 16 random NN shapes faster, +1.0%; with a K floor 9 of 16, +1.9%)."""


def mn_major_a_pairs_fit(cfg: GemmConfig, m: int, kmajor: tuple[bool, bool]) -> bool:
    """Whether plan_config's final choice ``cfg`` - a cooperative 16-bit 128x128 tile, no cluster, ping-pong,
    stream-K or swap-AB - runs in 2x1 clusters instead: an M-major, b K-major, M >= CLUSTER_MN_MAJOR_A_MIN_M
    and an even number of tile rows (no idle half-pairs; odd from CLUSTER_MN_MAJOR_A_ODD_MIN_ROWS)."""
    from .scheduler import cdiv
    rows = cdiv(m, BLOCK_M)
    rows_pair = rows % 2 == 0 or 0 < CLUSTER_MN_MAJOR_A_ODD_MIN_ROWS <= rows
    return (0 < CLUSTER_MN_MAJOR_A_MIN_M <= m and rows_pair and not kmajor[0] and kmajor[1]
            and cfg.in_bytes == 2
            and (cfg.block_m, cfg.block_n) == (BLOCK_M, 128) and cfg.cluster_size == 1
            and not (cfg.pingpong or cfg.stream_k or cfg.d_colmajor))


TILE_EFFICIENCY = {(128, 256): 1.0, (128, 192): 1.0, (128, 128): 0.92, (192, 192): 0.89, (192, 128): 0.85,
                   **{(128, w): 0.97 for w in NARROW_BOX_NS}}
"""Work per unit time of a tile shape relative to 128x256 (the schedule models'): at 4096^3 192x192 ran 642 against
128x256's 718 TFLOP/s at about equal rounds; 128x128 draws about 8% more power per FLOP than 128x256 at the 700 W
cap; the widths between the multiples of 64 measured 0.96-1.04 of this model's time (median per width)."""
TALL_MIN_RATIO = 0.96
"""choose_tall: tall tiles when the model's time of the heuristic's choice is at least this share of theirs."""
TALL_MIN_M = 384


SPLIT_TAIL_OVERHEAD = 0.5
"""schedule_cost: a last wave split s >= 3 ways after full waves costs SPLIT_TAIL_OVERHEAD x (s - 1) / s of a round
more than its share (the fix-up and the short k ranges), for every tile shape; fp16/bf16 and fp8, not tf32 (it
moved tf32 shapes away from the 192-row tiles tf32 runs well: -2% on six).  H200: 22 of 28 random fp16/bf16/e4m3
shapes whose choice it changes faster, +3.8%."""


STREAM_K_MODEL_OVERHEAD = 0.25
"""schedule_cost: rounds a stream-K partial wave costs beyond its share of the SMs (its fix-up, the split tiles'
shorter k ranges); 0 prices it at its share, which under-priced it.  H200 out of sample: 16 of 16 random shapes
whose plan it moves faster, +10.1% (0.5: 8 of 16, -2%)."""


def schedule_cost(m: int, n: int, k: int, sm_count: int, block_m: int, block_n: int, stream_k: bool = False,
                  block_k: int = BLOCK_K, split_tail_overhead: float = 0.0) -> float:
    """choose_tall's model of a schedule's length: rounds of whole-K tiles
    (:meth:`scheduler.Decomposition.time_in_rounds`; stream-K's partial wave
    as its share of the SMs; a last wave split s >= 3 ways after full waves
    ``split_tail_overhead`` x (s - 1) / s of a round longer) x tile area /
    TILE_EFFICIENCY.  Not a measurement."""
    from . import scheduler
    tiles, kb = tile_count(m, n, block_n, 1, block_m), scheduler.cdiv(k, block_k)
    if stream_k:
        full, tail = divmod(tiles, sm_count)
        rounds = full + tail / sm_count + (STREAM_K_MODEL_OVERHEAD if tail else 0.0)
    else:
        rounds = split_rounds(tiles, kb, sm_count, split_tail_overhead, narrow=block_n < 128)
    return rounds * block_m * block_n / TILE_EFFICIENCY[(block_m, block_n)]


def split_rounds(units: int, k_blocks: int, slots: int, split_tail_overhead: float, narrow: bool = False) -> float:
    """The models' rounds of a data-parallel / split-K schedule of ``units`` whole-K units on ``slots``
    (:meth:`scheduler.Decomposition.time_in_rounds`), a last wave split s >= 3 ways after full waves
    ``split_tail_overhead`` x (s - 1) / s of a round longer (schedule_cost, pair_schedule_cost). The models keep
    the tail splits they were calibrated with (at most MAX_SPLITS, as chain=True gives): the kernels'
    TAIL_MAX_SPLITS tails would change the rules' choices unmeasured."""
    from . import scheduler
    dec = scheduler.decompose(units, k_blocks, slots, narrow=narrow, chain=True)
    rounds = dec.time_in_rounds(slots)
    if dec.splits >= 3 and dec.tiles_dp > 0:
        rounds += split_tail_overhead * (dec.splits - 1) / dec.splits
    return rounds


WIDTH_192_RATIO = 1.0
"""plan_config: 128x192 tiles instead of a 16-bit 128x256 choice without a cluster (choose_width_192) when the
128x192 plan (its own stream-K / split choice, no cluster) is modelled (:func:`config_cost`, 128x192 as efficient
as 128x256) at most this share of the 128x256 one's, K >= WIDTH_192_MIN_K and 192-wide columns pad N by more than
WIDTH_192_MIN_PAD_GAIN x N less than 256-wide ones; 0: never.  Without the padding and K conditions it lost up to
19% where 192 pads more.  H200 out of sample: 17 of 24 random shapes faster, +4.4% (N = 576 +32%)."""
WIDTH_192_MIN_K = 1024
WIDTH_192_MIN_PAD_GAIN = 0.02


NARROW_WIDTH_RATIO = 0.95
"""plan_config: a 128xW tile between the multiples of 64 (NARROW_RULE_NS) instead of a 16-bit 128x256 or 128x192
choice without a cluster (choose_narrow_width) when the best such plan is modelled (:func:`schedule_cost`,
TILE_EFFICIENCY 0.97) at most this share of the choice's; 0: never.  The margin covers the model's spread around
the measurements; the rule runs last, on what the tall and swap rules leave (applied before them it displaced
their better plans).  H200 out of sample: 16 of 20 random shapes faster, +6.85%; about 4% of random 16-bit TN/NN
shapes move."""
NARROW_RULE_NS = (160, 176, 208, 224, 240)
"""choose_narrow_width's candidates: NARROW_BOX_NS without 144, which lost 7 of the 8 times an early form of the rule
picked it (-1% to -9.5%)."""
NARROW_MIN_K = 1024
"""choose_narrow_width: K from which the widths between the multiples of 64 are weighed (WIDTH_192_MIN_K)."""
NARROW_OVER_TALL_RATIO = 0.85
"""choose_narrow_width: the ratio against a 192-row choice of a width in NARROW_OVER_TALL_NS (0: never; the narrow
widths then only replace 128x256 / 128x192 / long-K 128x128). At 0.95 the losses sat at model ratios 0.89-0.95.
H200 out of sample at 0.85: 13 of 16 random shapes faster, +11.4%."""
NARROW_OVER_TALL_NS = (128,)
"""... the 192-row choices' widths it applies to: 192x128 (against 192x192 the narrow widths ran mixed, -25% to
+21%)."""
NARROW_OVER_TALL_192_SPLIT = False
"""... and 192x192 choices with fewer tiles than SMs (split-K in one round; False: never).  Off: mixed on the H200 (9
of 16 random shapes faster, +3.45%)."""
NARROW_PAD_SLACK = 0.0
"""choose_narrow_width: a width is weighed when its columns pad N by at most this share of N more than 256-wide ones
(0: never more).  Single shapes gain from slack (bf16 2736x1280x8816: 128x224 +11% over 128x256, its 132 tiles
filling the wave that 110 did not), but 0.05 ran 10 of 16 random shapes faster, -0.4%: kept at 0."""


NARROW_OVER_128_RATIO = 0.95
"""choose_narrow_width: the ratio against a cooperative 128x128 choice without a cluster (0: never) from K =
NARROW_OVER_128_MIN_K, weighing 128x192 and 128x256 too (NARROW_OVER_128_NS), the 128x128 plan priced at
NARROW_OVER_128_EFFICIENCY.  At long K a 128x128 tile loads twice 128x256's bytes per FLOP; long-K 128x128 plans
(split-K or stream-K, fewer than about 0.8 waves of 128x256 tiles) were the oracle's worst rows.  The K floor is
where the gain held (K 2056-2336: 5 of 12 faster).  H200 out of sample: 21 of 24 random shapes faster, +12.0%."""
NARROW_OVER_128_MIN_K = 2560
NARROW_OVER_128_EFFICIENCY = 0.8
NARROW_OVER_128_STREAM_K = True
"""... and each width's stream-K plan too where its tiles are fewer than the SMs (False: only the plan its own rules
give); with NARROW_OVER_128_EFFICIENCY 0.8 (0.92, its TILE_EFFICIENCY, priced those stream-K plans above 128x128).
H200 out of sample, both together: 13 of 16 random shapes faster, +6.25%."""
NARROW_OVER_128_MN_MAJOR_B = True
"""... with an N-major B too, 128x192 and 128x256 only (the narrow kernels take K-major B; False: K-major B only).
H200 out of sample (NT, TT): 14 of 16 random shapes faster, +8.7%."""
NARROW_OVER_128_NS = (*NARROW_RULE_NS, 192, 256)
"""choose_narrow_width's candidates against a 128x128 choice."""


def choose_narrow_width(cfg: GemmConfig, plan_width, m: int, n: int, k: int, sm_count: int) -> GemmConfig | None:
    """The 128xW plan to run instead of the choice ``cfg`` (on the kernel's M x N x K), or None: ``cfg`` -
    plan_config's final choice, after the tall and swap rules - a cooperative 16-bit tile without a
    cluster or swap-AB, K >= NARROW_MIN_K, and one of
      128x256 / 128x192: W in NARROW_RULE_NS, ratio NARROW_WIDTH_RATIO;
      192x128 (NARROW_OVER_TALL_NS; 192x192 with fewer tiles than SMs under NARROW_OVER_TALL_192_SPLIT):
        W in NARROW_RULE_NS, ratio NARROW_OVER_TALL_RATIO;
      128x128 from K = NARROW_OVER_128_MIN_K: W in NARROW_OVER_128_NS (192 and 256 too), ratio
        NARROW_OVER_128_RATIO, the 128x128 plan priced at NARROW_OVER_128_EFFICIENCY, each width's stream-K
        plan weighed too where its tiles are fewer than the SMs (NARROW_OVER_128_STREAM_K);
    the widths between the multiples of 64 only with a K-major B (what the narrow kernels take; an N-major
    B keeps 192 and 256, and the 128x128 case only under NARROW_OVER_128_MN_MAJOR_B).  Among the widths
    whose columns pad N no more than 256-wide ones (+ NARROW_PAD_SLACK x N), the plan ``plan_width(W)``
    (its own stream-K / split choice) of the least modelled schedule (:func:`config_cost`), if it has no
    cluster and is at most the ratio x ``cfg``'s."""
    if cfg.cluster_size > 1 or cfg.pingpong or cfg.d_colmajor or cfg.in_bytes != 2 or k < NARROW_MIN_K:
        return None
    over_128 = False
    if cfg.block_m == TALL_BLOCK_M:         # choose_tall's 192x128 (and one-round 192x192 with the switch)
        split_192 = (NARROW_OVER_TALL_192_SPLIT and cfg.block_n == 192
                     and tile_count(m, n, 192, 1, TALL_BLOCK_M) < sm_count)
        ratio = NARROW_OVER_TALL_RATIO if cfg.block_n in NARROW_OVER_TALL_NS or split_192 else 0.0
        widths = NARROW_RULE_NS
    elif cfg.block_n == 128:                # a long-K cooperative 128x128 choice
        over_128 = True
        ratio = (NARROW_OVER_128_RATIO if k >= NARROW_OVER_128_MIN_K
                 and (cfg.b_kmajor or NARROW_OVER_128_MN_MAJOR_B) else 0.0)
        widths = NARROW_OVER_128_NS
    elif cfg.block_n in (192, 256):
        ratio, widths = NARROW_WIDTH_RATIO, NARROW_RULE_NS
    else:
        return None
    if not cfg.b_kmajor:                    # the narrow kernels take K-major B only
        widths = tuple(w for w in widths if w not in NARROW_BOX_NS)
    if ratio <= 0 or not widths:
        return None
    base = config_cost(cfg, m, n, k, sm_count)      # (un-swapped: the kernel's M x N is the user's)
    if over_128:
        base *= TILE_EFFICIENCY[(BLOCK_M, 128)] / NARROW_OVER_128_EFFICIENCY
    best = None
    for w in widths:
        if padded(n, w) > padded(n, 256) + NARROW_PAD_SLACK * n:
            continue
        alts = [plan_width(w)]
        if over_128 and NARROW_OVER_128_STREAM_K and not alts[0].stream_k and tile_count(m, n, w, 1) < sm_count:
            alts.append(plan_width(w, streamk=True))     # (a width's stream-K plan where its tiles are few)
        for alt in alts:
            cost = config_cost(alt, m, n, k, sm_count)
            if alt.cluster_size == 1 and (best is None or cost < best[0]):
                best = (cost, alt)
    return best[1] if best is not None and best[0] <= ratio * base else None


def padded(n: int, block: int) -> int:
    """``n`` rounded up to whole ``block``-wide tiles."""
    from .scheduler import cdiv
    return cdiv(n, block) * block


def width_192_pads_less(n: int) -> bool:
    """Whether 192-wide tile columns pad N by more than WIDTH_192_MIN_PAD_GAIN x N less than 256-wide ones
    (choose_width_192 and misaligned_width_192_fits)."""
    return padded(n, 256) - padded(n, 192) > WIDTH_192_MIN_PAD_GAIN * n


def choose_width_192(cfg: GemmConfig, narrow, m: int, n: int, k: int, sm_count: int) -> GemmConfig | None:
    """The 128x192 plan to run instead of the 128x256 choice ``cfg`` (on the kernel's M x N x K), or None
    (see WIDTH_192_RATIO): ``cfg`` 16-bit without a cluster, K >= WIDTH_192_MIN_K, 192-wide tiles pad N
    by more than WIDTH_192_MIN_PAD_GAIN x N less, and the 128x192 plan - ``narrow()``, built only when
    those hold - without a cluster and modelled at most WIDTH_192_RATIO of ``cfg``'s schedule."""
    if (WIDTH_192_RATIO <= 0 or cfg.block_n != 256 or cfg.cluster_size > 1 or ELEMENT_BYTES[cfg.in_kind] != 2
            or k < WIDTH_192_MIN_K or not width_192_pads_less(n)):
        return None
    alt = narrow()
    shorter = (alt.cluster_size == 1
               and schedule_cost(m, n, k, sm_count, alt.block_m, alt.block_n, alt.stream_k, alt.block_k,
                                 split_tail_overhead(alt))
               <= WIDTH_192_RATIO * schedule_cost(m, n, k, sm_count, cfg.block_m, cfg.block_n, cfg.stream_k,
                                                  cfg.block_k, split_tail_overhead(cfg)))
    return alt if shorter else None


def split_tail_overhead(cfg: GemmConfig) -> float:
    """The split-tail term of ``cfg``'s input kind (SPLIT_TAIL_OVERHEAD; none for tf32)."""
    return 0.0 if cfg.in_kind == TF32 else SPLIT_TAIL_OVERHEAD


def config_cost(cfg: GemmConfig, m: int, n: int, k: int, sm_count: int) -> float:
    """:func:`schedule_cost` of ``cfg`` on the user's M x N x K (the kernel's
    N x M when ``cfg`` runs swap-AB), with choose_tall's split-tail term."""
    km, kn = (n, m) if cfg.d_colmajor else (m, n)
    return schedule_cost(km, kn, k, sm_count, cfg.block_m, cfg.block_n, cfg.stream_k, cfg.block_k,
                         split_tail_overhead(cfg))


SWAP_WAVES_RATIO = 0.91
"""plan_config: swap-AB for a large 16-bit problem when the swapped configuration's modelled schedule
(:func:`config_cost`) is at most this share of the chosen one's (at 0.92 nine of fourteen measurements ran
slower).  The swapped kernel stores D column-major, which the model does not see.  H200: 18 of 20 random shapes
faster, +6.3%; NN/NT/TT 12 of 12."""


SWAP_WAVES_TALL_RATIO_LOWP = 0.80
"""plan_config: the ratio for tf32 and per-tensor fp8 when the choice is a 192-row tile (128-row choices use
SWAP_WAVES_RATIO).  H200: from 192x192 at model ratio 0.79 e4m3 ran 4 of 5 and tf32 5 of 5 shapes faster swapped;
at 0.85-0.91 mixed (e4m3 -10% to -15%)."""


def padded_area(cfg: GemmConfig, rows: int, cols: int) -> int:
    """The area cfg's tile grid covers on a kernel problem of rows x cols (whole tiles)."""
    return tile_count(rows, cols, cfg.block_n, 1, cfg.block_m) * cfg.block_m * cfg.block_n


def swap_adds_area(cfg: GemmConfig, swapped: GemmConfig, m: int, n: int) -> bool:
    """From a 128-row choice ``cfg`` (on M x N), whether the swapped kernel's grid (on N x M) covers more padded
    area: then plan_config does not swap for waves, whatever the model says. H200: every measured swap from a
    128x256 choice onto a larger grid ran 3% to 20% slower (29 measurements, fp16 / bf16 / e4m3, 16-bit and fp32
    output; e.g. 3200x1728x8192, 182 tiles for 175: -7%); every one onto a smaller grid ran faster, +3.6% to +36%
    (31, tf32 too).  The model's split-tail term had put the larger grids at 0.90 of the choice: both orientations
    take two rounds, and a 2-way split tail costs less in the model than a 3-way one.  Not used from 192-row
    choices, whose tiles run at another efficiency (their measured swaps won and lost on both sides of equal
    area)."""
    return cfg.block_m == BLOCK_M and padded_area(swapped, n, m) > padded_area(cfg, m, n)


def swap_waves_limit(cfg: GemmConfig, m: int, n: int, batches: int, *, kinds: tuple[int, int],
                     out_fp32: bool, block: bool) -> float:
    """The largest modelled ratio (:func:`config_cost` of the swapped orientation D^T = B^T A^T, tiles over N x M, to
    ``cfg``'s) at which plan_config runs swap-AB instead of ``cfg`` (the rules' choice with nothing forced); 0.0
    where it never does.  The rule applies to one batch, M and N >= TALL_MIN_M, ``cfg`` neither swapped already
    nor clustered nor narrower than 128, and a swap-AB kernel (not block-scaled): fp16/bf16 with 16-bit output
    SWAP_WAVES_RATIO; tf32 (any output; measured with fp32), per-tensor fp8 with 16-bit output (measured e4m3,
    bf16 out) and fp16/bf16 with fp32 output SWAP_WAVES_RATIO from a 128-row choice and SWAP_WAVES_TALL_RATIO_LOWP
    from a 192-row one.  From a 128-row choice plan_config also needs the swapped grid no larger (swap_adds_area).
    The tile grid over N x M can quantise into whole waves where the one over M x N leaves a partial one (5376 x
    3200: 128x256 tiles 42 x 13 = 546 = 4.1 waves of 132, swapped 25 x 21 = 525 = 3.98)."""
    if not (batches == 1 and min(m, n) >= TALL_MIN_M and swap_buildable(block=block)
            and not cfg.d_colmajor and cfg.cluster_size == 1 and cfg.block_n >= 128):
        return 0.0
    sixteen = kinds[0] in (FP16, BF16) and kinds[1] == kinds[0]
    if sixteen and not out_fp32:
        return SWAP_WAVES_RATIO
    if sixteen or kinds == (TF32, TF32) or (is_fp8(kinds[0]) and is_fp8(kinds[1]) and not out_fp32):
        return SWAP_WAVES_RATIO if cfg.block_m == BLOCK_M else SWAP_WAVES_TALL_RATIO_LOWP
    return 0.0


TALL_OVER_PINGPONG_MAX_WAVES = 2
"""choose_tall replaces a ping-pong 128x128 choice by 192-row tiles when those fill at most this many waves, and
beyond that only by 192x128 tiles with K of at least TALL_128_OVER_PINGPONG_MIN_K_BLOCKS k-blocks: beyond two
waves ping-pong, which hides the epilogues, beat 192x192 on 17 of 20 random shapes out of sample (+4%); within two
waves (3072x3072x{3072,4096}) 192x192 stays 5% ahead."""
TALL_128_OVER_PINGPONG_MIN_K_BLOCKS = 32
"""(see TALL_OVER_PINGPONG_MAX_WAVES) 192x128 over ping-pong 128x128 beyond two waves and under 32 k-blocks:
ping-pong ran faster on 18 of 20 random shapes out of sample (+4.9%); with more k-blocks, or within two waves,
192x128 mostly held."""


TALL_SPLIT_MIN_K_BLOCKS = 21
"""choose_tall: for 16-bit inputs, not a 192-row tile whose schedule splits every tile (no full wave: the kernel's
scheduler.decompose) into splits of fewer than this many k-blocks on average (0: any); fp8 and tf32 keep their
tall choices (e.g. e4m3 1536x1536x4096 192x192 in 2 splits of 16).  A split's fix-up (its fp32 192-row partial
through the workspace) is a fixed cost that short splits do not amortise, and schedule_cost prices one-round
splits at their share of the SMs only. In the stored oracle rows every such plan at 9-20 k-blocks per split lost
>= 8% to another plan, five of nine at 22.5-25.5 did not.  H200 out of sample: 26 of 32 random shapes faster
(+3.9%, +14.1%)."""


def tall_split_too_short(cfg: GemmConfig, m: int, n: int, k: int, sm_count: int, block_n: int) -> bool:
    """Whether choose_tall's 16-bit 128-row choice ``cfg`` may not give way to 192x``block_n`` tiles because
    those would run every tile split (no full wave) into splits shorter than TALL_SPLIT_MIN_K_BLOCKS
    k-blocks (the cooperative kernel's decomposition)."""
    if TALL_SPLIT_MIN_K_BLOCKS <= 0 or cfg.in_bytes != 2:
        return False
    from . import scheduler
    dec = scheduler.decompose(tile_count(m, n, block_n, 1, TALL_BLOCK_M), scheduler.cdiv(k, cfg.block_k),
                              sm_count)
    return dec.tiles_dp == 0 and dec.splits >= 2 and dec.k_blocks < TALL_SPLIT_MIN_K_BLOCKS * dec.splits


def choose_tall(cfg: GemmConfig, m: int, n: int, k: int, batches: int, sm_count: int) -> int | None:
    """The tall tile's width (192 or 128) to run instead of the heuristic's 128-row choice ``cfg`` (on the kernel's M
    x N), or None: for un-swapped, un-clustered, not block-scaled problems of one batch with M >= TALL_MIN_M
    (fp16/bf16, tf32 and per-tensor fp8, one model), when :func:`schedule_cost` of the better tall tile is at most
    1 / TALL_MIN_RATIO of the choice's.  192-row tiles quantise M = 1536, 3072, ... into whole rounds where
    128-row ones leave a partial wave.  A ping-pong 128x128 choice is replaced only within
    TALL_OVER_PINGPONG_MAX_WAVES waves of tall tiles, and beyond them only by 192x128 tiles with K of at least
    TALL_128_OVER_PINGPONG_MIN_K_BLOCKS k-blocks (ping-pong hides the epilogues).  For 16-bit inputs a tall width
    whose every tile would be split into splits under TALL_SPLIT_MIN_K_BLOCKS k-blocks is not weighed.

    H200, batch timing: bf16 1536x1024x65536 654 -> 763 TFLOP/s (0.85 -> 0.99 of cuBLAS), e4m3 1536x768x65536 0.80
    -> 1.11 of cuBLASLt, tf32 1536x768x65536 1.03 -> 1.91 of cuBLAS; the shapes the model keeps on 128-row tiles
    ran slower tall (4096^3 bf16 718 vs 642 TFLOP/s)."""
    if (cfg.d_colmajor or cfg.scale_mode or cfg.cluster_size > 1
            or cfg.block_n < 128 or batches != 1 or m < TALL_MIN_M):
        return None
    from . import scheduler
    ours = config_cost(cfg, m, n, k, sm_count)          # cfg: un-swapped, 128 rows
    widths = [bn for bn in TALL_BLOCK_NS if not tall_split_too_short(cfg, m, n, k, sm_count, bn)]
    if not widths:
        return None
    cost, best = min((schedule_cost(m, n, k, sm_count, TALL_BLOCK_M, bn, block_k=cfg.block_k,
                                    split_tail_overhead=split_tail_overhead(cfg)), bn) for bn in widths)
    if (cfg.pingpong and tile_count(m, n, best, batches, TALL_BLOCK_M) > TALL_OVER_PINGPONG_MAX_WAVES * sm_count
            and (best == 192 or scheduler.cdiv(k, cfg.block_k) < TALL_128_OVER_PINGPONG_MIN_K_BLOCKS)):
        return None                 # the ping-pong choice stays
    return best if ours >= TALL_MIN_RATIO * cost else None


def _tall_config(m, n, k, batch, sm_count, *, kinds, kmajor, out_name, use_c, c_rowmajor, bias_kind, activation,
                 block, block_m, block_n, swap, cluster, pingpong, streamk) -> GemmConfig:
    """plan_config's forced ``block_m=192``: the checks, then the configuration."""
    if block_m != TALL_BLOCK_M:
        raise ValueError(f"_block_m must be {BLOCK_M} or {TALL_BLOCK_M}, got {block_m!r}")
    if block:
        raise ValueError(f"_block_m={TALL_BLOCK_M}: block-scaled fp8 runs 128-row tiles only (192x128 with one "
                         f"promotion temporary per consumer measured 3-13% slower)")
    if block_n is not None and block_n not in TALL_BLOCK_NS:
        raise ValueError(f"_block_m={TALL_BLOCK_M} needs _block_n in {TALL_BLOCK_NS} (96 accumulators per thread "
                         f"at most), got {block_n}")
    if pingpong or streamk or (cluster is not None and cluster_dims(cluster) != (1, 1)):
        raise ValueError(f"_block_m={TALL_BLOCK_M}: 192-row tiles are cooperative, without clusters or stream-K "
                         f"(got _pingpong={pingpong!r}, _streamk={streamk!r}, _cluster={cluster!r})")
    swap = choose_swap(swap, m, n, batch, sm_count, out_fp32=out_name == "float32", block=False)
    return _kernel_config(block_n or TALL_BLOCK_NS[-1], swap, kinds, kmajor, out_name, use_c, c_rowmajor,
                          bias_kind, activation, block_m=block_m)


def as_tall(cfg: GemmConfig, block_n: int) -> GemmConfig:
    """``cfg`` on 192-row tiles ``block_n`` wide: cooperative, without stream-K or a cluster, as many
    stages as fit (stages 0, see GemmConfig)."""
    return replace(cfg, block_m=TALL_BLOCK_M, block_n=block_n, pingpong=False, stream_k=False, cluster_m=1,
                   cluster_n=1, stages=0)


def _kernel_config(block_n, swap, kinds, kmajor, out_name, use_c, c_rowmajor, bias_kind, activation,
                   **kw) -> GemmConfig:
    """The GemmConfig of the user's problem in the kernel's view: with swap-AB
    the kernel's A is b (its kind and majorness), its B is a, D is
    column-major, a row-major C is column-major and the bias runs along rows."""
    kind_a, kind_b = (kinds[1], kinds[0]) if swap else kinds
    a_kmajor, b_kmajor = (kmajor[1], kmajor[0]) if swap else kmajor
    return GemmConfig(block_n, kind_a, a_kmajor, b_kmajor, OUT_TYPES[out_name], use_c,
                      (not c_rowmajor) != swap if use_c else False, swap, bias_kind, swap, ACTIVATIONS[activation],
                      b_kind=kind_b, **kw)


def trimmed_lines(kmajor: bool, rows: int, tile: int, cfg: GemmConfig) -> int:
    """Box lines of a K-major operand's TMA map (kernels/gemm.cu
    ``trimmed_lines``, the same rule): an operand with fewer rows than its
    tile (M < 128 for A, N < BLOCK_N for B; there is one tile row/column
    then) is loaded with round8(rows) lines instead of a mostly zero-filled
    box; the kernel counts the stage's bytes the same way.  Full tiles,
    MN-major operands and clusters keep the whole tile."""
    if kmajor and cfg.cluster_size == 1 and rows < tile:
        return (rows + 7) // 8 * 8
    return tile


def with_tile(cfg: GemmConfig, block_n: int) -> GemmConfig:
    return replace(cfg, block_n=block_n, stages=max_stages(block_n, cfg.has_c, cfg.scale_mode, cfg.block_m))


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


def tuning_candidates(plan) -> list[dict]:
    """What ``rawcoop.tune`` times for a problem: the heuristic's choice (all
    None), then tile width (with ping-pong on and off for 128x128; 128x64 too
    when the kernel's M fits one tile row; 128x192 for 16-bit inputs) x raster
    group x split-K (auto, none, 2, 4) x swap-AB (when M <= 64 < N), and
    for M > 128 the 192x192 and 192x128 tiles (un-swapped,
    cooperative) x group x split-K; for 16-bit inputs with a K-major b the
    widths between the multiples of 64 (NARROW_BOX_NS, un-swapped, group 8,
    split-K auto / none and stream-K).  Block-scaled fp8: 128x128 cooperative
    and 128x64 cooperative/ping-pong tiles, never swap-AB, no 192-row tiles."""
    from .scheduler import cdiv
    out = [dict(block_n=None, group=None, swap=None, splits=None, pingpong=None, streamk=None, block_m=None)]
    cfg = getattr(plan, "cfg", None)
    k_blocks = cdiv(plan.k, getattr(cfg, "block_k", BLOCK_K))
    block_scaled = getattr(cfg, "block_scaled", False)
    split_settings = [s for s in (None, 1, 2, 4) if s is None or s <= k_blocks]
    wide_192 = ((192, False),) if ELEMENT_BYTES[getattr(cfg, "in_kind", BF16)] == 2 else ()   # 16-bit only
    for swap in ((True, False) if plan.swap_ok else (False,)):
        narrow = plan.m if swap else plan.n
        tiles = (((64, False),) if narrow <= 64 else ((128, True), (128, False), (256, False)) + wide_192)
        if narrow > 64 and plan.m <= BLOCK_M:     # (never swapped: swap-AB means M <= 64)
            tiles += ((64, False),)         # one tile row: 128x64 over the whole K (choose_block_n's one-row rule)
        if block_scaled:                    # 128x128 cooperative, 128x64 cooperative or ping-pong only
            tiles = ((64, False), (64, True)) if narrow <= 64 else ((128, False), (64, False), (64, True))
        for bn, pp in tiles:
            for group in (4, 8, 16):
                for splits in split_settings:
                    out.append(dict(block_n=bn, group=group, swap=swap, splits=splits, pingpong=pp, streamk=None,
                                    block_m=None))
                if not pp:                  # stream-K: cooperative tiles, no forced splits
                    out.append(dict(block_n=bn, group=group, swap=swap, splits=None, pingpong=False, streamk=True,
                                    block_m=None))
    # the user's b is the kernel's A when the plan is swapped: narrow widths need it K-major (the kernel's B)
    b_kmajor = getattr(cfg, "a_kmajor" if getattr(cfg, "d_colmajor", False) else "b_kmajor", True)
    if not block_scaled and wide_192 and b_kmajor and plan.n > 64:
        for bn in NARROW_BOX_NS:            # (choose_narrow_width)
            for splits, streamk in ((None, None), (1, None), (None, True)):
                out.append(dict(block_n=bn, group=8, swap=False, splits=splits, pingpong=False, streamk=streamk,
                                block_m=None))
    if not block_scaled and plan.m > BLOCK_M:   # 192-row tiles (choose_tall), the user's M as the kernel's
        for bn in TALL_BLOCK_NS:
            for group in (4, 8, 16):
                for splits in split_settings:
                    out.append(dict(block_n=bn, group=group, swap=False, splits=splits, pingpong=False,
                                    streamk=None, block_m=TALL_BLOCK_M))
    return out


LAYOUTS = {"TN": (True, True), "NN": (False, True), "NT": (False, False), "TT": (True, False)}
"""BLAS-style layout names -> (A K-major, B K-major).  As in cuBLAS's column-major
view: "T" for A means A is stored row-major (M, K); "N" for B means B is
column-major (K, N)."""


def config_for_problem(m: int, n: int, k: int, in_kind: int, a_kmajor: bool, b_kmajor: bool,
                       sm_count: int = 132, batches: int = 1, b_kind: int = -1) -> GemmConfig:
    """The configuration rawcoop.gemm picks for a plain-epilogue problem with
    the default output type (no tuning table): :func:`plan_config` with no
    forced option.  ``in_kind``/``b_kind``: a's and b's input kinds
    (True/False: bf16/fp16)."""
    in_kind = int(in_kind)
    b_kind = in_kind if b_kind == -1 else int(b_kind)
    out_name = {v: name for name, v in OUT_TYPES.items()}[DEFAULT_OUT[in_kind]]
    return plan_config(m, n, k, batches, sm_count, kinds=(in_kind, b_kind), kmajor=(bool(a_kmajor), bool(b_kmajor)),
                       out_name=out_name, use_c=False, c_rowmajor=True, bias_kind=0, activation=None, block=False)


def tile_count(m: int, n: int, block_n: int, batches: int = 1, block_m: int = BLOCK_M) -> int:
    return batches * -(-m // block_m) * -(-n // block_n)
