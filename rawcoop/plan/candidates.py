"""The candidate space: every legal way to run one problem.

A :class:`Problem` is a validated ``rawcoop.gemm`` call as the planner sees it.  A :class:`Candidate` is one
kernel configuration (:class:`~rawcoop.plan.kernel_config.GemmConfig`) with its work decomposition over the
persistent grid.  :func:`enumerate_candidates` lists them all:

* orientation: as given, or swap-AB (the kernel computes Dᵀ = Bᵀ·Aᵀ; not for block-scaled fp8, whose A
  scales are per row);
* tile: 128 rows x every built width, or 192 rows x 128 / 192;
* cluster: none, 2x1 (pairs along M share B by multicast) or 1x2 (pairs along N share A);
* consumers: cooperative (two or three warpgroups share a tile) or ping-pong (two alternate tiles);
* decomposition: data-parallel, split-K of the partial last wave (:func:`scheduler.decompose`) or stream-K;
* staging buffers in the pipeline ring where every CTA has one whole tile and that buys a stage (always
  taken there: the same schedule with a deeper pipeline).

Legality is stated once: :class:`GemmConfig` refuses what the kernel does not build, and
:func:`problem_rule` refuses what this problem cannot use.  Nothing here prefers one candidate to another;
rawcoop/plan/cost.py prices them and rawcoop/plan/select.py keeps the cheapest.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import scheduler
from .kernel_config import (BLOCK_M, BUILT_BLOCK_NS, DEFAULT_OUT, ELEMENT_BYTES, OUT_TYPES, TALL_BLOCK_M,
                            TALL_BLOCK_NS, GemmConfig, kernel_config, max_stages)

CLUSTERS = ((1, 1), (2, 1), (1, 2))
TILES = tuple((BLOCK_M, bn) for bn in BUILT_BLOCK_NS) + tuple((TALL_BLOCK_M, bn) for bn in TALL_BLOCK_NS)
RING_BLOCK_NS = (64,)
"""Tile widths whose staging buffers may live in the pipeline ring (EPI_RING): those the GPU suite runs."""
PITCH_SECTOR = 32
"""Bytes of an L2 sector: a pitch that is an odd multiple of 16 makes every other 128-byte box line straddle a
sector boundary (:attr:`Problem.misaligned`)."""


@dataclass(frozen=True)
class Problem:
    """The user's D (M x N) = a (M x K) · b (K x N), ``batch`` times, and what shapes the kernel: input kinds of
    a and b, whether each is K-major, the output dtype name, C (``use_c``, row- or column-major), the bias kind,
    the activation, block-scaled fp8, a's and b's pitches in bytes (None: contiguous) and the SM count."""
    m: int
    n: int
    k: int
    batch: int = 1
    kinds: tuple[int, int] = (1, 1)
    kmajor: tuple[bool, bool] = (True, True)
    out_name: str | None = None
    use_c: bool = False
    c_rowmajor: bool = True
    bias_kind: int = 0
    activation: str | None = None
    block: bool = False
    pitches: tuple[int, int] | None = None
    sm_count: int = 132

    def __post_init__(self):
        if self.out_name is None:
            names = {v: name for name, v in OUT_TYPES.items()}
            object.__setattr__(self, "out_name", names[DEFAULT_OUT[self.kinds[0]]])
        if self.pitches is None:
            ea, eb = (ELEMENT_BYTES[x] for x in self.kinds)
            object.__setattr__(self, "pitches", ((self.k if self.kmajor[0] else self.m) * ea,
                                                 (self.k if self.kmajor[1] else self.n) * eb))

    def kernel_view(self, swap: bool) -> tuple[int, int]:
        """The kernel's (M, N): the user's, or (N, M) swapped."""
        return (self.n, self.m) if swap else (self.m, self.n)

    def misaligned(self, swap: bool) -> tuple[bool, bool]:
        """Whether the kernel's A and B pitches are odd multiples of 16 bytes (:data:`PITCH_SECTOR`)."""
        a, b = (p % PITCH_SECTOR == PITCH_SECTOR // 2 for p in self.pitches)
        return (b, a) if swap else (a, b)


@dataclass(frozen=True)
class Candidate:
    """One way to run a problem: the kernel configuration (``cfg.d_colmajor``: swap-AB), the forced split count
    (None: the scheduler's split-K of the partial last wave; 1: data-parallel), the decomposition and the
    persistent grid (clusters with a cluster) over ``slots`` resident CTAs or clusters."""
    cfg: GemmConfig
    splits: int | None
    dec: scheduler.Decomposition
    grid: int
    slots: int

    @property
    def swap(self) -> bool:
        return self.cfg.d_colmajor

    @property
    def label(self) -> str:
        c = self.cfg
        parts = [f"{c.block_m}x{c.block_n}"] + ["pp"] * c.pingpong + ["sk"] * c.stream_k
        parts += [f"cl{c.cluster_m}x{c.cluster_n}"] * (c.cluster_size > 1) + ["swap"] * c.d_colmajor
        parts += ["ring"] * c.epi_ring + [f"s{self.dec.splits}"] * (self.dec.splits > 1 and not c.stream_k)
        return " ".join(parts)


def cluster_slots(cfg: GemmConfig, sm_count: int) -> int:
    """Resident CTAs (clusters with a cluster) the model assumes: one CTA per SM, pairs on half the SMs.  The
    launch asks the driver (cuOccupancyMaxActiveClusters) for the real count."""
    return sm_count // cfg.cluster_size


def schedule_of(p: Problem, cfg: GemmConfig, splits: int | None, slots: int | None = None) -> Candidate:
    """``cfg`` on ``p`` with ``splits`` (see :class:`Candidate`), as rawcoop/gemm_plan.py launches it."""
    km, kn = p.kernel_view(cfg.d_colmajor)
    slots = cluster_slots(cfg, p.sm_count) if slots is None else slots
    s = scheduler.schedule(km, kn, cfg.block_m, cfg.block_n, slots, None, p.batch, k=p.k, block_k=cfg.block_k,
                           splits=splits, cluster=cfg.cluster, stream_k=cfg.stream_k, chain=cfg.pingpong)
    return Candidate(cfg, splits, s.decomposition, s.grid, slots)


def problem_rule(p: Problem, cfg: GemmConfig) -> str | None:
    """Why ``cfg`` cannot run ``p`` (None: it can).  What the kernel builds at all is GemmConfig's rule."""
    if p.block and cfg.d_colmajor:
        return ("block-scaled fp8 has no swap-AB kernel (a's per-row scales would become per-column scales of "
                "the kernel's B)")
    return None


def _config(p: Problem, swap: bool, block_m: int, block_n: int, cluster, pingpong: bool, stream_k: bool):
    """The GemmConfig of one point of the space, or the reason it is not legal."""
    try:
        cfg = kernel_config(block_n, swap, p.kinds, p.kmajor, p.out_name, p.use_c, p.c_rowmajor, p.bias_kind,
                            p.activation, cluster_m=cluster[0], cluster_n=cluster[1], pingpong=pingpong,
                            scale_mode=int(p.block), stream_k=stream_k, block_m=block_m)
    except ValueError as e:
        return str(e)
    return problem_rule(p, cfg) or cfg


def _ring(p: Problem, c: Candidate) -> Candidate | None:
    """``c`` with its staging buffers in the pipeline ring, where that is legal and buys a stage: cooperative
    128-row tiles without C or stream-K, one whole tile per CTA; 64 columns wide, the tile the ring kernel
    is verified on (RING_BLOCK_NS)."""
    cfg = c.cfg
    if (cfg.block_n not in RING_BLOCK_NS or p.use_c or cfg.pingpong or cfg.stream_k or cfg.block_m != BLOCK_M or cfg.block_scaled
            or c.dec.splits > 1 or c.dec.units > c.grid
            or max_stages(cfg.block_n, False, 0, BLOCK_M, True) <= cfg.stages):
        return None
    return replace(c, cfg=replace(cfg, epi_ring=True, stages=0))


def enumerate_candidates(p: Problem, rejected: list | None = None) -> list[Candidate]:
    """Every legal candidate for ``p`` (see the module docstring).  ``rejected``: if a list, the reasons of
    the illegal points are appended to it (for the error when forced options leave nothing)."""
    out = []
    for swap in (False, True):
        for block_m, block_n in TILES:
            for cluster in CLUSTERS:
                for pingpong in (False, True):
                    for stream_k in (False, True):
                        cfg = _config(p, swap, block_m, block_n, cluster, pingpong, stream_k)
                        if isinstance(cfg, str):
                            if rejected is not None:
                                rejected.append(((swap, block_m, block_n, cluster, pingpong, stream_k), cfg))
                            continue
                        seen = set()
                        for splits in ((None,) if stream_k else (None, 1)):
                            c = schedule_of(p, cfg, splits)
                            if c.dec in seen:
                                continue        # the scheduler's split-K found nothing to split
                            seen.add(c.dec)
                            out.append(_ring(p, c) or c)     # the same schedule with one stage more
    return out
