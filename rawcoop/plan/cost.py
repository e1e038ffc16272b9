"""The cost model: a candidate's time in microseconds, from its structure and fitted coefficients.

:func:`features` reads off a candidate what does not depend on any coefficient (per-k-block FLOPs and bytes of
one tile, rounds of whole and split units, epilogue and fix-up bytes, HBM bytes).  :func:`time_us` turns features
into a time with the coefficients of one GPU (:class:`Coefficients`, stored in ``cost_<gpu>.json`` beside this
file, fitted by ``bench/fit_cost_model.py`` to measured times of many candidates per shape).  The same
``time_us`` runs on one candidate (floats) and, in the fit, on arrays of features of thousands.

The model, per persistent CTA (or CTA pair with a cluster), in the order the kernel does the work:

* one k-block of one tile costs the larger of its MMA time (FLOPs at the SM's share of the dense tensor-core
  rate, times a per-tile-shape efficiency) and its load time (bytes from L2 at the lesser of one SM's and its
  share of the whole L2 bandwidth), plus a fraction ``overlap`` of the smaller.  Bytes count once per CTA
  pair for a multicast operand, ``misaligned`` times for an operand whose pitch is an odd multiple of 16 bytes
  (every other box line straddles an L2 sector), ``mn_major_a``/``_b`` times for an MN-major A/B (64-wide
  boxes), whose MMAs read transposed shared memory (``mn_mma_a``/``_b`` times the MMA time); fewer busy SMs run the tensor cores faster (``clock_gain``: the power cap lets their clocks rise);
* a CTA pair synchronises per k-block (``cluster_kb``) and per unit (``cluster_unit``);
* a cooperative unit is its k-blocks, the epilogue (a fixed part and the stored, and C's loaded, bytes,
  ``colmajor_epi`` times for a column-major D) and a
  pipeline refill; ping-pong consumers overlap one tile's epilogue with the other's mainloop;
* the schedule is the decomposition's rounds: whole-K units, then split units with their fix-up (spread:
  one partial written and read per split; a serial chain: one per split in turn; a split tail after full
  waves waits for the slowest of the CTAs that finish them: ``split_skew`` of the full waves' time), or stream-K's equal
  k-block shares with a fix-up per piece;
* the kernel cannot beat HBM (every operand and result byte once), nor the launch; a split or stream-K
  schedule zeroes its flags first.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from functools import lru_cache

from .kernel_config import ELEMENT_BYTES, TF32, trimmed_lines

KIND_RATE = {0: 1.0, 1: 1.0, TF32: 0.5, 3: 2.0, 4: 2.0}
"""Dense tensor-core rate of an input kind relative to fp16/bf16 (Hopper: tf32 half, fp8 twice)."""
TILE_KEYS = ("128x64", "128x64pp", "128x128", "128x128pp", "128x144", "128x160", "128x176", "128x192",
             "128x208", "128x224", "128x240", "128x256", "192x128", "192x192")
"""The tile shapes with their own efficiency coefficient (ping-pong tiles apart: one warpgroup per tile)."""
SMOOTH = 4.0
"""Exponent of the smooth maximum of the schedule's time and the HBM time (both bounds hold; near the corner
neither is reached)."""


@dataclass(frozen=True)
class Coefficients:
    """One GPU's fitted coefficients (units: µs, bytes per µs; ``eff`` fractions of the dense rate, per
    :data:`TILE_KEYS`).  ``peak_tflops`` (dense fp16/bf16) and ``sm_count`` are the GPU's data sheet."""
    peak_tflops: float
    sm_count: int
    eff: tuple
    bw_sm: float
    bw_l2: float
    bw_hbm: float
    overlap: float
    cluster_kb: float
    cluster_unit: float
    misaligned: float
    mn_major_a: float
    mn_major_b: float
    mn_mma_a: float
    mn_mma_b: float
    clock_gain: float
    epi_us: float
    colmajor_epi: float
    bw_epi: float
    fill: float
    pp_fill: float
    fill0: float
    fix_us: float
    split_skew: float
    bw_fix: float
    sk_piece: float
    ws_zero: float
    launch: float

    FITTED = ("eff", "bw_sm", "bw_l2", "bw_hbm", "overlap", "cluster_kb", "cluster_unit", "misaligned", "mn_major_a", "mn_major_b",
              "mn_mma_a", "mn_mma_b", "clock_gain", "epi_us", "colmajor_epi", "bw_epi", "fill", "pp_fill", "fill0", "fix_us", "split_skew", "bw_fix", "sk_piece", "ws_zero", "launch")

    def as_dict(self) -> dict:
        return {f.name: (list(getattr(self, f.name)) if f.name == "eff" else getattr(self, f.name))
                for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "Coefficients":
        return cls(**{f.name: (tuple(d[f.name]) if f.name == "eff" else d[f.name]) for f in fields(cls)})


def model_path(gpu: str = "h200") -> str:
    return os.path.join(os.path.dirname(__file__), f"cost_{gpu}.json")


@lru_cache(maxsize=None)
def load(gpu: str = "h200") -> tuple[Coefficients, dict]:
    """(coefficients, provenance: GPU, date, command, data, validation) of a stored model."""
    with open(model_path(gpu)) as f:
        doc = json.load(f)
    return Coefficients.from_dict(doc["coefficients"]), {k: v for k, v in doc.items() if k != "coefficients"}


def tile_key(cfg) -> int:
    pp = "pp" if cfg.pingpong else ""
    return TILE_KEYS.index(f"{cfg.block_m}x{cfg.block_n}{pp}" if f"{cfg.block_m}x{cfg.block_n}{pp}" in TILE_KEYS
                           else f"{cfg.block_m}x{cfg.block_n}")


def features(p, c) -> dict:
    """What the model needs of candidate ``c`` (rawcoop/plan/candidates.py) on problem ``p``, all
    coefficient-free numbers."""
    cfg, dec = c.cfg, c.dec
    km, kn = p.kernel_view(cfg.d_colmajor)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    ea, eb = ELEMENT_BYTES[cfg.in_kind], ELEMENT_BYTES[cfg.b_kind]
    mis_a, mis_b = p.misaligned(cfg.d_colmajor)
    rows_a = trimmed_lines(cfg.a_kmajor, km, bm, cfg)
    cols_b = trimmed_lines(cfg.b_kmajor, kn, bn, cfg)
    ob = cfg.out_bytes
    kb = dec.k_blocks
    f = dict(tile=tile_key(cfg), flops_kb=2.0 * bm * bn * bk / KIND_RATE[cfg.in_kind],
             a_bytes=rows_a * bk * ea / cfg.cluster_n, b_bytes=cols_b * bk * eb / cfg.cluster_m,
             a_mis=float(mis_a), b_mis=float(mis_b), a_mn=float(not cfg.a_kmajor), b_mn=float(not cfg.b_kmajor),
             active=float(min(c.grid * cfg.cluster_size, p.sm_count)), cluster=float(cfg.cluster_size > 1),
             pp=float(cfg.pingpong), d_col=float(cfg.d_colmajor), epi_bytes=float(bm * bn * ob * (2 if cfg.has_c else 1)),
             fix_bytes=8.0 * bm * bn, ws=float(dec.split_tiles > 0), sk=0.0, sk_kbs=0.0, sk_pieces=0.0,
             r_full=0.0, kb_full=float(kb), r_split=0.0, kb_split=0.0, fix_n=0.0, tail_split=0.0)
    if dec.sk_ctas:
        f["r_full"] = float(-(-dec.tiles_dp // c.grid))
        per, rem = dec.sk_shares
        f.update(sk=1.0, sk_kbs=float(per + (1 if rem else 0)), sk_pieces=float(dec.splits))
    elif dec.splits == 1:
        f["r_full"] = float(-(-dec.tiles // c.grid))
    else:
        f["r_full"] = float(-(-dec.tiles_dp // c.grid))
        f["r_split"] = float(-(-(dec.units - dec.tiles_dp) // c.grid))
        f["kb_split"] = float(-(-kb // dec.splits))
        f["fix_n"] = float(1 if dec.spread(c.grid) else dec.splits)
        f["tail_split"] = float(dec.tiles_dp > 0)
    f["hbm_bytes"] = float(p.batch * (p.m * p.k * ELEMENT_BYTES[p.kinds[0]] + p.k * p.n * ELEMENT_BYTES[p.kinds[1]])
                           + p.batch * p.m * p.n * ob * (2 if cfg.has_c else 1))
    if cfg.block_scaled:
        f["a_bytes"] += bm * 4 / cfg.cluster_n        # each stage's 128 A scales
    return f


def _max(x, y):
    return (x + y + abs(x - y)) * 0.5


def _min(x, y):
    return (x + y - abs(x - y)) * 0.5


def time_us(f, co: Coefficients, eff=None):
    """The modelled time of a candidate with features ``f`` (floats, or arrays of many candidates' features:
    then ``eff`` holds each one's tile efficiency)."""
    if eff is None:
        eff = co.eff[f["tile"]]
    mma = f["flops_kb"] / (co.peak_tflops * 1e6 / co.sm_count * eff)
    mma = (mma * (1 - co.clock_gain * (1 - f["active"] / co.sm_count))
           * (1 + (co.mn_mma_a - 1) * f["a_mn"]) * (1 + (co.mn_mma_b - 1) * f["b_mn"]))
    nbytes = (f["a_bytes"] * (1 + (co.misaligned - 1) * f["a_mis"]) * (1 + (co.mn_major_a - 1) * f["a_mn"])
              + f["b_bytes"] * (1 + (co.misaligned - 1) * f["b_mis"]) * (1 + (co.mn_major_b - 1) * f["b_mn"]))
    load = nbytes / _min(co.bw_sm, co.bw_l2 / f["active"])
    t_kb = _max(mma, load) + co.overlap * _min(mma, load) + co.cluster_kb * f["cluster"]
    epi = co.epi_us + f["epi_bytes"] * (1 + (co.colmajor_epi - 1) * f["d_col"]) / co.bw_epi
    fix = co.fix_us + f["fix_bytes"] / co.bw_fix
    pp = f["pp"]

    def unit(kbs):
        return (pp * _max(kbs * t_kb + co.pp_fill, epi) + (1 - pp) * (kbs * t_kb + epi + co.fill)
                + co.cluster_unit * f["cluster"])

    full = f["r_full"] * unit(f["kb_full"])
    compute = (full * (1 + co.split_skew * f["tail_split"]) + f["r_split"] * (unit(f["kb_split"]) + fix * f["fix_n"])
               + f["sk"] * (f["sk_kbs"] * t_kb + f["sk_pieces"] * (co.sk_piece + fix) + epi)
               + pp * epi + co.fill0)
    hbm = f["hbm_bytes"] / co.bw_hbm
    body = (compute ** SMOOTH + hbm ** SMOOTH) ** (1 / SMOOTH)
    return co.launch + co.ws_zero * f["ws"] + body


def predict(p, c, co: Coefficients | None = None) -> float:
    """Modelled µs of candidate ``c`` on problem ``p`` (the stored H200 model by default)."""
    co = co or load()[0]
    return time_us(features(p, c), co)
