"""``rawcoop.tune``: time the candidate configurations for one problem on
this GPU and remember the fastest, so later ``rawcoop.gemm`` calls on the same
problem use it.

Winners are stored per (GPU name, problem signature) in
``<cache dir>/tuned-v1.json`` (atomic replace under a file lock, merged with
what other processes wrote), loaded lazily once per process, and consulted
when a call's plan is built (never on the repeated-call path).  A problem's
signature is its dtypes, M, N, K, batch, operand majorness and epilogue kind.
"""
from __future__ import annotations

import json
import statistics
import threading
import warnings

from . import config
from .plan.kernel_config import BLOCK_M, BLOCK_NS, NARROW_BOX_NS, TALL_BLOCK_M, TALL_BLOCK_NS

_FILE = "tuned-v1.json"
CHOICE_KEYS = ("block_n", "group", "swap", "splits", "pingpong", "streamk", "block_m", "cluster")
"""A stored winner: rawcoop.gemm's forced options without the underscore
(None: the planner's choice; entries without "streamk", "block_m" or
"cluster" read those as None)."""
_lock = threading.Lock()
_table: dict | None = None


def signature(gpu: str, in_name: str, out_name: str, m: int, n: int, k: int, batch: int, a_kmajor: bool,
              b_kmajor: bool, has_c: bool, bias: int, act: int) -> str:
    return (f"{gpu}|{in_name}->{out_name}|{m}x{n}x{k}|L{batch}|A{'K' if a_kmajor else 'M'}"
            f"B{'K' if b_kmajor else 'N'}|c{int(has_c)}b{bias}a{act}")


def _path():
    return config.cache_dir() / _FILE


def _load() -> dict:
    global _table
    if _table is None:
        with _lock:
            if _table is None:
                try:
                    _table = json.loads(_path().read_text())
                    if not isinstance(_table, dict):
                        _table = {}
                except (OSError, ValueError):
                    _table = {}
    return _table


def _valid(choice) -> bool:
    """A stored winner must name one of our configurations (the file is
    user-writable data, never trusted blindly)."""
    if not isinstance(choice, dict):
        return False
    bn, group, swap, splits, pp, sk, bm, cluster = (choice.get(k) for k in CHOICE_KEYS)
    tall = bm == TALL_BLOCK_M
    return (bm in (None, BLOCK_M, TALL_BLOCK_M)
            and (cluster is None or (isinstance(cluster, list) and cluster in ([1, 1], [2, 1], [1, 2])))
            and bn in ((None, *TALL_BLOCK_NS) if tall else (None, *BLOCK_NS, 192, *NARROW_BOX_NS))   # 128x192 and
            # the narrow widths: 16-bit, and for those K-major b, no swap (gemm checks)
            and not (tall and (pp or sk))
            and (group is None or (type(group) is int and 1 <= group <= 64))
            and swap in (None, True, False) and (splits is None or (type(splits) is int and 1 <= splits <= 16))
            and pp in (None, True, False) and not (pp and bn is not None and bn > 128)
            and sk in (None, True, False) and not (sk and (pp or splits is not None)))


def forced_of(choice: dict):
    """A stored winner as the planner's forced options."""
    from .plan.select import Forced
    cluster = choice.get("cluster")
    return Forced(choice.get("block_n"), choice.get("block_m"), choice.get("swap"),
                  tuple(cluster) if cluster else None, choice.get("splits"), choice.get("pingpong"),
                  choice.get("streamk"))


def lookup(sig: str) -> dict | None:
    choice = _load().get(sig)
    return choice if _valid(choice) else None


def reset() -> None:
    """Forget the in-memory table (it is re-read from disk on next use)."""
    global _table
    with _lock:
        _table = None


def _persist(sig: str, choice: dict) -> None:
    from .cache import _atomic_write, file_lock
    path = _path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with file_lock(_FILE, f"writing {path}; writing it anyway", stacklevel=5):
            try:
                on_disk = json.loads(path.read_text())
                if not isinstance(on_disk, dict):
                    on_disk = {}
            except (OSError, ValueError):
                on_disk = {}
            on_disk[sig] = choice
            _atomic_write(path, json.dumps(on_disk, indent=1, sort_keys=True).encode())
    except OSError as e:
        warnings.warn(f"rawcoop: could not save the tuned configuration to {path} ({e}); kept in memory",
                      RuntimeWarning, stacklevel=3)


def tune(a, b, *, c=None, alpha: float = 1.0, beta: float = 0.0, bias=None, activation=None, out_dtype=None,
         iters: int = 20, persist: bool = True, verbose: bool = False, scale_a=None, scale_b=None,
         a_format=None, b_format=None, precision=None, scale_mode=None) -> dict:
    """Time the planner's choice and the candidates its cost model ranks
    cheapest for ``rawcoop.gemm(a, b, ...)`` (tile, cluster, swap-AB,
    decomposition; rawcoop/plan/select.py tuning_candidates) with CUDA events (median of
    ``iters`` calls after a warm-up) and remember the fastest for this GPU and
    problem.  Returns ``{"signature", "choice", "us", "default_us",
    "results"}``.  Every candidate's output is checked against the default
    configuration's before it may win.  ``scale_a``, ``scale_b``,
    ``a_format``, ``b_format``, ``precision``, ``scale_mode``: as for
    ``rawcoop.gemm`` (fp8, tf32, block-scaled fp8)."""
    from . import _cuda, gemm_plan
    from .gemm import gemm
    from .operands import gemm_operands
    from .plan.select import tuning_candidates

    cp = _cuda.cupy()
    # The same inputs as rawcoop.gemm (torch tensors, DLPack / __cuda_array_interface__ arrays), viewed once.
    a, b, c, bias, _, scale_a, scale_b = gemm_operands(cp, a, b, c, bias, None, scale_a, scale_b)
    kw = dict(c=c, alpha=alpha, beta=beta, bias=bias, activation=activation, out_dtype=out_dtype)
    for name, v in (("scale_a", scale_a), ("scale_b", scale_b), ("a_format", a_format), ("b_format", b_format),
                    ("precision", precision), ("scale_mode", scale_mode)):
        if v is not None:
            kw[name] = v
    sig = gemm_plan._plan_for(a, b, **kw).signature
    previous = _load().pop(sig, None)      # time the plain heuristic as the "default" candidate
    gemm_plan._PLANS.clear()
    plan = gemm_plan._plan_for(a, b, **kw)
    ref = gemm(a, b, **kw).astype(cp.float32)
    scale = float(cp.linalg.norm(ref)) or 1.0
    out = cp.empty(plan.out_shape, dtype=plan.out_dtype)
    results = []
    for cand in tuning_candidates(plan.problem):
        forced = {"_" + key: cand.get(key) for key in CHOICE_KEYS}
        try:
            d = gemm(a, b, out=out, **forced, **kw)
        except Exception as e:  # noqa: BLE001 - a candidate that cannot run is skipped
            results.append(dict(cand, us=None, error=f"{type(e).__name__}: {e}"))
            continue
        err = float(cp.linalg.norm(d.astype(cp.float32) - ref)) / scale
        if not err < 1e-2:
            results.append(dict(cand, us=None, error=f"result differs from the default by {err:.2e}"))
            continue
        for _ in range(2):
            gemm(a, b, out=out, **forced, **kw)
        times = []
        for _ in range(iters):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            gemm(a, b, out=out, **forced, **kw)
            e.record()
            e.synchronize()
            times.append(cp.cuda.get_elapsed_time(s, e) * 1e3)
        results.append(dict(cand, us=statistics.median(times)))
        if verbose:
            print(f"  {cand} {results[-1]['us']:.1f} us")
    ok = [r for r in results if r["us"] is not None]
    if not ok:
        if previous is not None:
            _load()[sig] = previous
        raise RuntimeError(f"no candidate configuration ran for {sig}: {results}")
    best = min(ok, key=lambda r: r["us"])
    default = next((r for r in ok if all(r.get(key) is None for key in CHOICE_KEYS)), None)
    choice = {k: best.get(k) for k in CHOICE_KEYS}
    choice["us"] = round(best["us"], 2)
    _load()[sig] = choice
    if persist:
        _persist(sig, choice)
    gemm_plan._PLANS.clear()          # plans built before now do not know the winner
    return {"signature": sig, "choice": choice, "us": best["us"],
            "default_us": default["us"] if default else None, "results": results}

