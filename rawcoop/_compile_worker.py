"""Worker process for crash-isolated warm-up: compiles the KernelSpecs it
reads (JSON on stdin) into the cache, one at a time, and reports each on
stdout.  It never touches the GPU (the parent hides all devices).

Protocol, one line each:  ``START <i>``  then  ``DONE <i> <json>``  or
``FAIL <i> <json>``.  If the process dies (NVRTC/ptxas can segfault), the
parent blames the spec that STARTed without finishing and re-queues the rest.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time


def _inject_fault(label: str) -> None:
    """Fault injection for the crash-isolation tests:
    ``RAWCOOP_WARMUP_FAULT=<label substring>=segv|hang`` makes this worker die
    (SIGSEGV, as a crashing NVRTC would) or hang on matching configurations."""
    spec = os.environ.get("RAWCOOP_WARMUP_FAULT")
    if not spec:
        return
    needle, _, kind = spec.rpartition("=")
    if needle and needle in label:
        if kind == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif kind == "hang":
            time.sleep(3600)


def main() -> int:
    from .cache import default_cache
    from .compiler import CompileError, KernelSpec

    jobs = json.load(sys.stdin)
    cache = default_cache()
    for job in jobs:
        i = job["index"]
        spec = KernelSpec(job["source"], job["name"], tuple(tuple(d) for d in job["defines"]))
        print(f"START {i}", flush=True)
        _inject_fault(spec.label)
        t0 = time.perf_counter()
        before = cache.stats.compiled
        try:
            cache.get(spec, job.get("arch", "sm_90a"))
        except CompileError as e:
            print(f"FAIL {i} " + json.dumps({"error": "CompileError", "log": e.log[-4000:]}), flush=True)
            continue
        except Exception as e:  # noqa: BLE001 - report, keep going
            print(f"FAIL {i} " + json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        compiled = cache.stats.compiled > before
        print(f"DONE {i} " + json.dumps({"compiled": compiled, "seconds": time.perf_counter() - t0}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
