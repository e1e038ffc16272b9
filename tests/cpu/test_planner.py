"""The planner (rawcoop/plan): frozen choices, the cost model against its measurements, legality and forced
options."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from rawcoop.plan import cost
from rawcoop.plan.candidates import Problem, enumerate_candidates
from rawcoop.plan.kernel_config import BF16, E4M3, FP16, TF32, GemmConfig
from rawcoop.plan.select import Forced, choose, ranked, tuning_candidates

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))


def test_frozen_plan_table():
    """The choices for tests/cpu/plans-h200.json's problems are as pinned (``python tools/pin_plans.py``
    rewrites the table after a deliberate change: the diff is the review)."""
    import pin_plans
    pinned = json.loads(pin_plans.OUT.read_text())
    now = pin_plans.table()
    assert set(now) == set(pinned)
    changed = {k: (pinned[k]["plan"], now[k]["plan"]) for k in now if now[k] != pinned[k]}
    assert not changed, f"planner choices changed (pinned, now): {changed}"


def test_stored_model_reproduces_its_report():
    """The coefficients in rawcoop/plan/cost_h200.json give the fit and validation scores stored beside them on
    the measured candidates (bench/results/oracle-h200.jsonl); and the validation shapes (never fitted) are
    planned within the bounds the model was accepted at."""
    from bench import costdata, fit_cost_model
    co, doc = cost.load("h200")
    rows = costdata.read_rows(str(fit_cost_model.DEFAULT_DATA))
    ms = costdata.measured(rows)
    val = [m for m in ms if costdata.is_validation(rows[m.row])]
    fit = [m for m in ms if not costdata.is_validation(rows[m.row])]
    assert fit_cost_model.regret(val, co) == doc["report"]["validation"]
    assert fit_cost_model.regret(fit, co) == doc["report"]["fit"]
    v = doc["report"]["validation"]["model"]
    assert v["shapes"] >= 150 and v["geomean"] <= 1.02
    assert v["geomean"] < doc["report"]["validation"]["auto_then"]["geomean"]


def test_refit_reproduces_stored_coefficients():
    """bench/fit_cost_model.py on the stored data gives the stored coefficients (the data file is what the
    command in its provenance produced)."""
    pytest.importorskip("scipy")
    from bench import costdata, fit_cost_model
    rows = costdata.read_rows(str(fit_cost_model.DEFAULT_DATA))
    ms = [m for m in costdata.measured(rows) if not costdata.is_validation(rows[m.row])]
    refit = fit_cost_model.fit(ms).as_dict()
    stored = cost.load("h200")[0].as_dict()
    for name, value in stored.items():
        values = value if isinstance(value, list) else [value]
        got = refit[name] if isinstance(refit[name], (list, tuple)) else [refit[name]]
        for a, b in zip(values, got):
            assert math.isclose(a, b, rel_tol=1e-3), (name, a, b)


@pytest.mark.parametrize("kinds", [(BF16, BF16), (FP16, FP16), (TF32, TF32), (E4M3, E4M3)])
def test_time_grows_with_work(kinds):
    """More K or more tiles never model as faster for the same candidate shape."""
    for m, n, k in ((256, 4096, 4096), (4096, 4096, 1024), (8192, 8192, 8192)):
        t = ranked(Problem(m, n, k, 1, kinds))[0][0]
        assert 0 < t < ranked(Problem(m, n, 2 * k, 1, kinds))[0][0]
        assert t < ranked(Problem(2 * m, n, k, 1, kinds))[0][0]


def test_candidates_are_legal_and_distinct():
    for p in (Problem(4096, 4096, 4096), Problem(64, 7168, 2048, 1, (E4M3, E4M3)),
              Problem(777, 1029, 4097, 1, (FP16, FP16), (False, False)),
              Problem(1024, 1024, 8192, 1, (E4M3, E4M3), block=True)):
        cands = enumerate_candidates(p)
        assert len(cands) > 8
        keys = [(c.cfg, c.dec) for c in cands]
        assert len(set(keys)) == len(keys)
        for c in cands:
            GemmConfig(**{f: getattr(c.cfg, f) for f in c.cfg.__dataclass_fields__})   # legal
            assert c.grid <= c.slots and c.dec.units >= c.grid
            if p.block:
                assert not c.cfg.d_colmajor and c.cfg.block_n in (64, 128)
            if c.cfg.pingpong:
                assert c.cfg.block_n <= 128


def test_forced_options_narrow_the_choice():
    p = Problem(3000, 5000, 2504)
    for forced in (Forced(block_n=128, pingpong=True), Forced(swap=True), Forced(cluster=(1, 2)), Forced(splits=1),
                   Forced(block_m=192), Forced(streamk=True), Forced(cluster=2, block_n=256), Forced(splits=3)):
        c = choose(p, forced)
        assert forced.matches(c.cfg)
        if forced.splits is not None:
            assert c.splits == forced.splits and c.dec.splits == forced.splits
        if forced.cluster == 2:
            assert c.cfg.cluster == (2, 1)


@pytest.mark.parametrize("forced, words", [
    (Forced(block_n=256, pingpong=True), "ping-pong"),
    (Forced(block_m=192, streamk=True), "192-row"),
    (Forced(block_n=176, swap=True), "row-major kernel D"),
])
def test_impossible_forced_options_name_the_rule(forced, words):
    with pytest.raises(ValueError, match="no kernel combines the forced options") as e:
        choose(Problem(2048, 2048, 2048), forced)
    assert words in str(e.value)


def test_block_scaled_has_no_swap():
    with pytest.raises(ValueError, match="swap-AB"):
        choose(Problem(64, 4096, 4096, 1, (E4M3, E4M3), block=True), Forced(swap=True))


@pytest.mark.parametrize("bad", [dict(cluster=3), dict(cluster=(2, 2)), dict(splits=0), dict(splits=2.0),
                                 dict(splits=2, streamk=True)])
def test_malformed_forced_options(bad):
    with pytest.raises(ValueError):
        Forced(**bad)


def test_tuning_shortlist_runs_through_forced_options():
    """Every entry of rawcoop.tune's shortlist, forced, plans to that candidate's configuration."""
    p = Problem(512, 12288, 4096)
    shortlist = tuning_candidates(p)
    assert shortlist[0]["block_n"] is None and len(shortlist) > 10
    for cand in shortlist[1:]:
        f = Forced(cand["block_n"], cand["block_m"], cand["swap"], tuple(cand["cluster"]), cand["splits"],
                   cand["pingpong"], cand["streamk"])
        assert f.matches(choose(p, f).cfg)


def test_misaligned_pitch_costs_more():
    """An operand pitch that is an odd multiple of 16 bytes models slower for the same candidate."""
    aligned = Problem(4096, 4096, 4096)
    odd = Problem(4096, 4096, 4096, pitches=(4104 * 2, 4096 * 2))
    c = choose(aligned)
    assert cost.predict(odd, c) > cost.predict(aligned, c)


def test_warm_file_holds_the_planner_choices_on_its_grid():
    """rawcoop/plan/warm_h200.json is current: the planner's choice for a seeded sample of its grid is in it
    (``python tools/pin_plans.py`` rewrites it with the frozen table)."""
    import random

    import pin_plans
    from rawcoop.plan import builds
    stored = {c.spec for c in builds.planned_configs()}
    problems = list(pin_plans.grid_problems())
    for p in random.Random(7).sample(problems, 300):
        assert choose(p).cfg.spec in stored, p


def test_warm_sets_cover_most_automatic_plans():
    """Of 1000 seeded random plain problems, the default warm set (16-bit) and ``warmup --all`` (every kind)
    hold the kernel the planner picks for at least 90% (the rest compile at their first call)."""
    import random

    from rawcoop.plan import builds
    from rawcoop.plan.kernel_config import E5M2, LAYOUTS
    default, everything = set(builds.all_specs()), set(builds.all_specs(everything=True))
    rng = random.Random(26)
    hits = {True: [], False: []}
    for _ in range(1000):
        kind = rng.choice([BF16, FP16, TF32, E4M3, E5M2])
        sixteen = kind in (BF16, FP16)
        kmajor = rng.choice(list(LAYOUTS.values())) if sixteen else (True, True)
        m, n = rng.randint(1, 12000), 8 * rng.randint(1, 1500)
        k = rng.choice([512, 1024, 2048, 4096, 8192, 16384])
        spec = choose(Problem(m, n, k, 1, (kind, kind), kmajor, block=kind == E4M3 and rng.random() < 0.3)).cfg.spec
        hits[sixteen].append(spec in (default if sixteen else everything))
    for sixteen, h in hits.items():
        assert sum(h) >= 0.9 * len(h), (sixteen, sum(h), len(h))
