"""Choosing how a GEMM runs: the kernel configuration and its work decomposition.

``kernel_config``: the configuration type shared with the kernel build (:class:`~kernel_config.GemmConfig`,
whose checks are the one statement of what the kernel builds).  ``candidates``: the problem and every legal
candidate for it.  ``cost``: the cost model and its stored coefficients (``cost_h200.json``, fitted by
bench/fit_cost_model.py).  ``select``: the cheapest candidate under forced options, and ``rawcoop.tune``'s
shortlist.  ``scheduler``: the decomposition over the persistent grid (data-parallel, split-K, stream-K), the
same integers as kernels/scheduler.cuh.  ``builds``: the kernel sets the warm-up compiles.
"""
