"""GPU: rawcoop.tune times the candidates, persists the winner, and later
gemm calls on the same problem use it (and stay correct)."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _fresh(tmp_path, monkeypatch, m, n, k, seed):
    """A private cache directory, an empty tuning table and plan cache, and
    bf16 operands a (m, k), b (k, n).  Returns (gemm module, a, b)."""
    import cupy as cp
    import importlib
    import ml_dtypes
    from rawcoop import tuning
    gemm_mod = importlib.import_module("rawcoop.gemm")
    monkeypatch.setenv("RAWCOOP_CACHE_DIR", str(tmp_path / "cache"))
    tuning.reset()
    gemm_mod._PLANS.clear()
    dt = np.dtype(ml_dtypes.bfloat16)
    rs = cp.random.RandomState(seed)
    return (gemm_mod, rs.standard_normal((m, k), dtype=cp.float32).astype(dt),
            rs.standard_normal((k, n), dtype=cp.float32).astype(dt))


def test_tune_persists_and_gemm_uses_the_winner(tmp_path, monkeypatch, capsys):
    import cupy as cp
    import rawcoop
    from rawcoop import tuning
    gemm_mod, a, b = _fresh(tmp_path, monkeypatch, 40, 776, 1024, 0)      # small M: swap-AB candidates too
    res = rawcoop.tune(a, b, iters=3)
    timed = [r for r in res["results"] if r["us"] is not None]
    assert len(timed) >= 20, res["results"]
    assert res["us"] == min(r["us"] for r in timed)
    assert (tmp_path / "cache" / "tuned-v1.json").exists()
    tuning.reset()                                   # a new process would read it back from disk
    gemm_mod._PLANS.clear()
    monkeypatch.setenv("RAWCOOP_PRINT_CONFIG", "1")
    d = rawcoop.gemm(a, b)
    assert "(tuned)" in capsys.readouterr().out
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    err = float(cp.linalg.norm(d.astype(cp.float64) - ref) / cp.linalg.norm(ref))
    assert err < 5e-3
    tuning.reset()
    gemm_mod._PLANS.clear()


def test_tune_times_the_shortlist_and_a_stored_tall_choice_is_used(tmp_path, monkeypatch):
    """tune times the planner's shortlist (its choice and the cost model's
    cheapest candidates: rawcoop/plan/select.py tuning_candidates), every
    one running and matching the default's output; a stored 192-row winner
    is what gemm then runs."""
    import cupy as cp
    import rawcoop
    from rawcoop import tuning
    from rawcoop.plan.select import tuning_candidates
    gemm_mod, a, b = _fresh(tmp_path, monkeypatch, 400, 520, 2048, 1)
    res = rawcoop.tune(a, b, iters=2, persist=False)
    want = tuning_candidates(gemm_mod._plan_for(a, b).problem)
    assert [{key: r[key] for key in want[0]} for r in res["results"]] == want, res["results"]
    assert all(r["us"] is not None for r in res["results"]), res["results"]
    sig = gemm_mod._plan_for(a, b).signature
    tuning._load()[sig] = dict(block_n=128, group=4, swap=False, splits=2, pingpong=False, streamk=None,
                               block_m=192)
    gemm_mod._PLANS.clear()
    plan = gemm_mod._plan_for(a, b)
    assert plan.tuned and plan.cfg.block_m == 192 and plan.cfg.block_n == 128 and plan.decomposition.splits == 2
    d = rawcoop.gemm(a, b)
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    assert float(cp.linalg.norm(d.astype(cp.float64) - ref) / cp.linalg.norm(ref)) < 5e-3
    tuning.reset()
    gemm_mod._PLANS.clear()
