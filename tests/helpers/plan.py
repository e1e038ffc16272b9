"""The planner's modules as one namespace for tests (``from helpers.plan import gc``), the planner's choice
under the keyword arguments tests spell problems with, and what GPU tests force to run a kernel variant
(:func:`variant_runs`, :func:`tail_split`)."""
from __future__ import annotations

import types

from rawcoop.plan import builds, kernel_config
from rawcoop.plan.candidates import Problem
from rawcoop.plan.select import Forced, choose, config_for_problem, tuning_candidates


def plan_config(m, n, k, batch, sm_count, *, kinds, kmajor, out_name, use_c=False, c_rowmajor=True, bias_kind=0,
                activation=None, block=False, block_n=None, swap=None, cluster=None, splits=None, pingpong=None,
                streamk=None, block_m=None, pitches=None):
    """The GemmConfig rawcoop.gemm plans for this problem and forced options (no tuning table)."""
    p = Problem(m, n, k, batch, tuple(kinds), tuple(kmajor), out_name, use_c, c_rowmajor, bias_kind, activation,
                block, pitches, sm_count)
    return choose(p, Forced(block_n, block_m, swap, cluster, splits, pingpong, streamk)).cfg


def variant_runs(a, b, *variants, **kw) -> list[dict]:
    """The forced options a GPU test of kernel variants runs ``rawcoop.gemm(a, b, **kw)`` with: each of
    ``variants`` (dicts of ``_`` options, checked to hold in the plan), then none (the automatic plan,
    checked to be the planner's choice: helpers.assert_planner_choice) where the planner chooses another
    configuration than all of them."""
    import helpers
    from rawcoop.gemm import _plan_for
    planned = []
    for forced in variants:
        plan = _plan_for(a, b, **kw, **forced)
        assert Forced(**{name[1:]: v for name, v in forced.items()}).matches(plan.cfg), (forced, plan.cfg.spec.label)
        planned.append((plan.cfg, plan.decomposition))
    auto = _plan_for(a, b, **kw)
    helpers.assert_planner_choice(auto)
    return list(variants) + ([] if (auto.cfg, auto.decomposition) in planned else [{}])


def tail_split(monkeypatch) -> None:
    """For the rest of the test, rawcoop.gemm runs the configuration the planner chooses under the forced
    options with the scheduler's own decomposition: split-K of the partial last wave where the scheduler
    splits it (rawcoop/plan/scheduler.py ``decompose``), whatever the cost model prices it at.  No ``_``
    option forces that decomposition (``_splits`` splits every tile).  Plans are cached in a fresh table
    meanwhile, so none of them outlives the test."""
    from rawcoop import gemm_plan
    from rawcoop.plan import candidates, select
    planned = select.choose

    def choose(p, forced=select.FREE):
        return candidates.schedule_of(p, planned(p, forced).cfg, None)
    monkeypatch.setattr(select, "choose", choose)
    monkeypatch.setattr(gemm_plan, "_PLANS", {})


gc = types.SimpleNamespace(**{**{k: v for k, v in vars(kernel_config).items() if not k.startswith("_")},
                              **{k: v for k, v in vars(builds).items() if not k.startswith("_")},
                              "plan_config": plan_config, "config_for_problem": config_for_problem,
                              "tuning_candidates": tuning_candidates, "Problem": Problem, "Forced": Forced,
                              "choose": choose})
