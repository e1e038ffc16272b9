"""Choosing a kernel configuration for a problem.

``configs``: the kernel-configuration type (:class:`configs.GemmConfig`, shared
with the kernel build), the registered configurations the warm-up compiles,
the legality rules and the plan for a problem (:func:`configs.plan_config`).
``scheduler``: the work decomposition of a plan over the persistent grid
(data-parallel, split-K, stream-K) and its cost arithmetic.
"""
