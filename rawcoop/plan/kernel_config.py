"""The kernel-configuration type, shared by the planner and the kernel build.

A :class:`GemmConfig` is everything kernels/gemm.cu takes as a compile-time constant: tile shape, stages, input
kinds, operand majorness, output type, the epilogue variant (C, bias, activation, D/C orientation), cluster,
consumer arrangement (cooperative or ping-pong) and work decomposition kind (stream-K or not).  Its
``__post_init__`` is the one statement of which combinations the kernel builds (kernels/gemm_config.cuh holds the
same rules as static_asserts); :attr:`GemmConfig.spec` is the compile key.

Input kinds (``IN_KIND`` for A, ``IN_KIND_B`` for B): 0 fp16, 1 bf16, 2 tf32 (fp32 in memory), 3 fp8 e4m3, 4 fp8
e5m2.  A K-major shared-memory row is always 128 bytes, so a k-block holds ``128 / element bytes`` K values
(:attr:`GemmConfig.block_k`: 64, 32 or 128) and the stage sizes, shared memory and stage counts do not depend on
the kind.

Scale modes (``scale_mode``, fp8 only): 0 per-tensor (the ``scale_a``/``scale_b`` pointers), 1 block-scaled
(``SCALE_MODE=1``: fp32 scales per 1x128 (row, k-block) of A and per 128x128 block of B, promoted per k-block in
the mainloop; each stage carries 512 more bytes, the 128 A scales of its k-block; 128x128 cooperative or 128x64
tiles only, see kernels/gemm.cu)."""
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
        if self.cluster_m == 2 and not self.b_kmajor and self.block_n % 128:
            raise ValueError(f"a 2x1 cluster with the kernel's B N-major splits B's tile into halves of whole "
                             f"64-column atoms: 128 or 256 columns, got {self.block_n}")
        if self.in_bytes != 2 and self.block_m == BLOCK_M and self.block_n not in BLOCK_NS:
            raise ValueError(f"_block_n must be one of {BLOCK_NS} for tf32/fp8 inputs on 128-row tiles (the widths "
                             f"their kernels are verified at), got {self.block_n}")
        if self.pingpong and self.block_n > 128:
            raise ValueError(f"ping-pong consumers hold a whole tile each: 128 columns at most, got {self.block_n}")
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



LAYOUTS = {"TN": (True, True), "NN": (False, True), "NT": (False, False), "TT": (True, False)}
"""BLAS-style layout names -> (A K-major, B K-major).  As in cuBLAS's column-major
view: "T" for A means A is stored row-major (M, K); "N" for B means B is
column-major (K, N)."""



def kernel_config(block_n, swap, kinds, kmajor, out_name, use_c, c_rowmajor, bias_kind, activation,
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



def as_tall(cfg: GemmConfig, block_n: int) -> GemmConfig:
    """``cfg`` on 192-row tiles ``block_n`` wide: cooperative, without stream-K or a cluster, as many
    stages as fit (stages 0, see GemmConfig)."""
    return replace(cfg, block_m=TALL_BLOCK_M, block_n=block_n, pingpong=False, stream_k=False, cluster_m=1,
                   cluster_n=1, stages=0)



def padded(n: int, block: int) -> int:
    """``n`` rounded up to whole ``block``-wide tiles."""
    return -(-n // block) * block



def tile_count(m: int, n: int, block_n: int, batches: int = 1, block_m: int = BLOCK_M) -> int:
    return batches * -(-m // block_m) * -(-n // block_n)
