"""How the benchmark times: CUDA events, input sets rotated past the L2,
alternating rounds.

Every comparison warms both sides up on every input set (rawcoop builds and
caches a plan per set of pointers; that host work must not land inside a
timed call), then runs R rounds.  In each round every side is timed over
``iters`` calls on the rotating input sets, the sides in turn, so the clock
and power drift of a run (up to ~10%) falls on all of them alike; a
side's time against another's is then taken per round and the median over
rounds reported (bench/rows.py).

``cp`` is the CuPy module (or a stand-in with ``cuda.Event``,
``cuda.get_elapsed_time`` and ``cuda.Device``); nothing here imports it.
"""
from __future__ import annotations

import math
import statistics
import time

TIMINGS = ("calls", "batch")
"""calls: the median of per-call CUDA event pairs; batch: one pair around all of a round's calls."""


def n_sets_for(nbytes: int, l2: int) -> int:
    """Input sets to rotate so that together they are >= 3x the L2 (1..8):
    every call then reads its operands from DRAM, as in an application."""
    return max(1, min(8, math.ceil(3 * l2 / max(1, nbytes))))


def time_calls(cp, fn, n_sets: int, iters: int, host: list | None = None, timing: str = "calls") -> float:
    """Seconds per call of ``fn(i % n_sets)`` over ``iters`` calls.

    ``timing`` "calls" (default): the median of the calls, each between two
    CUDA events.  "batch": one event pair around all ``iters`` calls, divided
    by ``iters``: no event records between calls, so while the host needs less
    time per call than the GPU, the GPU never waits for it and the time is
    the kernels' (back to back) rather than the host's; for kernels of a few
    tens of microseconds, where per-call events make both sides host-bound.
    ``host``: a list that gets this batch's host seconds per call (the
    Python loop, before waiting for the GPU).  When that is about the
    measured time, the GPU waited for the host between calls and the row
    measures host time, not the kernel (rows.HOST_BOUND)."""
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
    if timing == "batch":
        start, end = cp.cuda.Event(), cp.cuda.Event()
        t0 = time.perf_counter()
        start.record()
        for i in range(iters):
            fn(i % n_sets)
        end.record()
        if host is not None:
            host.append((time.perf_counter() - t0) / iters)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) * 1e-3 / iters
    starts = [cp.cuda.Event() for _ in range(iters)]
    ends = [cp.cuda.Event() for _ in range(iters)]
    t0 = time.perf_counter()
    for i in range(iters):
        starts[i].record()
        fn(i % n_sets)
        ends[i].record()
    if host is not None:
        host.append((time.perf_counter() - t0) / iters)
    ends[-1].synchronize()
    return statistics.median(cp.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends)) * 1e-3


def warm_up(cp, fns, n_sets: int) -> None:
    """Three passes of every ``fns`` entry over every input set, then a sync."""
    for _ in range(3):
        for i in range(n_sets):
            for fn in fns:
                fn(i)
    cp.cuda.Device().synchronize()


def compare(cp, ours, theirs, n_sets: int, rounds: int, iters: int,
            host: dict | None = None, timing: str = "calls") -> list[tuple[float, float | None]]:
    """Warm-up, then ``rounds`` rounds of (ours, theirs) timings in seconds.

    ``theirs`` None: rawcoop alone (theirs' time None).  ``host``: a dict
    that gets "ours"/"theirs" lists of host seconds per call, one per round.
    ``timing``: see time_calls."""
    warm_up(cp, [ours] if theirs is None else [ours, theirs], n_sets)

    def timed(fn, side):
        return time_calls(cp, fn, n_sets, iters, None if host is None else host.setdefault(side, []), timing)
    return [(timed(ours, "ours"), timed(theirs, "theirs") if theirs is not None else None) for _ in range(rounds)]


def compare_variants(cp, ours_list, theirs, n_sets: int, rounds: int, iters: int,
                     hosts: list | None = None, timing: str = "calls") -> list[list[tuple[float, float | None]]]:
    """:func:`compare` for several rawcoop variants of one problem in the
    SAME rounds: each round times the baseline (first in even rounds, last in
    odd ones) and every variant, their order rotated by one each round, so
    that a variant's per-round time can be set against another's of that
    round.  Returns, per variant, its (ours, theirs) seconds per round
    (theirs: the round's one baseline time, None without a baseline).
    ``hosts``: one dict per variant, as compare's ``host`` (the baseline's
    list is shared)."""
    nv = len(ours_list)
    host_theirs: list = []
    warm_up(cp, list(ours_list) if theirs is None else [*ours_list, theirs], n_sets)
    out: list[list[tuple[float, float | None]]] = [[] for _ in range(nv)]

    def timed(fn, host_list):
        return time_calls(cp, fn, n_sets, iters, host_list, timing)
    for r in range(rounds):
        tt = timed(theirs, host_theirs) if theirs is not None and r % 2 == 0 else None
        times = {}
        for j in [(r + x) % nv for x in range(nv)]:
            times[j] = timed(ours_list[j], None if hosts is None else hosts[j].setdefault("ours", []))
        if theirs is not None and r % 2 == 1:
            tt = timed(theirs, host_theirs)
        for j in range(nv):
            out[j].append((times[j], tt))
    if hosts is not None and theirs is not None:
        for h in hosts:
            h["theirs"] = host_theirs
    return out


def vs_first_fields(rounds_first, rounds_this, first_name: str) -> dict:
    """A variant row's time against the first variant's in the same rounds
    (compare_variants): per-round first time / this time, median and range
    (> 1: this variant is faster)."""
    rs = [a / b for (a, _), (b, _) in zip(rounds_first, rounds_this)]
    return {"vs_variant": first_name, "vs_first": statistics.median(rs), "vs_first_min": min(rs),
            "vs_first_max": max(rs)}
