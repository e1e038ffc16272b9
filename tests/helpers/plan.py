"""The planner's modules as one namespace for tests (``from helpers.plan import gc``), and the planner's choice
under the keyword arguments tests spell problems with."""
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


gc = types.SimpleNamespace(**{**{k: v for k, v in vars(kernel_config).items() if not k.startswith("_")},
                              **{k: v for k, v in vars(builds).items() if not k.startswith("_")},
                              "plan_config": plan_config, "config_for_problem": config_for_problem,
                              "tuning_candidates": tuning_candidates, "Problem": Problem, "Forced": Forced,
                              "choose": choose})
