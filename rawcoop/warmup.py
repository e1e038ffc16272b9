"""Crash-isolated warm-up: compile kernel configurations into the disk cache
in worker processes that never touch the GPU.

A compiler crash (NVRTC's ptxas stage has segfaulted on odd inputs) or a
timeout takes down only its worker: that configuration is reported failed by
name, the worker's remaining configurations are re-queued to a fresh worker,
and the rest of the warm-up continues.  Entries already in the cache are
verified first (the cubin the record names, with the recorded size and
sha256: ``KernelCache.verify``): a sound one is a hit, started by no worker;
a truncated or corrupt one is removed, rebuilt and reported as repaired.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .cache import default_cache
from .compiler import DEFAULT_ARCH, KernelSpec


@dataclass
class Outcome:
    spec: KernelSpec
    status: str            # "hit" | "compiled" | "failed"
    seconds: float = 0.0
    error: str = ""
    repaired: str = ""     # why the cached entry was unusable (then rebuilt), "" when it was fine or absent


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def repaired(self) -> list[Outcome]:
        """The configurations whose cache entry was corrupt (rebuilt, or failed)."""
        return [o for o in self.outcomes if o.repaired]

    def summary(self) -> str:
        slow = max((o for o in self.outcomes if o.status == "compiled"), key=lambda o: o.seconds, default=None)
        s = (f"warm-up: {len(self.outcomes)} kernels, {self.count('hit')} cache hits, "
             f"{self.count('compiled')} compiled, {self.count('failed')} failed, {self.seconds:.1f} s")
        if self.repaired:
            s += f"; {len(self.repaired)} corrupt cache entries rebuilt"
        if slow is not None:
            s += f"; slowest {slow.spec.label} {slow.seconds:.2f} s"
        return s

    def to_json(self) -> dict:
        return {"seconds": self.seconds, "total": len(self.outcomes), "hits": self.count("hit"),
                "compiled": self.count("compiled"), "failed": self.count("failed"), "repaired": len(self.repaired),
                "kernels": [{"kernel": o.spec.label, "status": o.status, "seconds": round(o.seconds, 4),
                             "error": o.error, **({"repaired": o.repaired} if o.repaired else {})}
                            for o in self.outcomes]}


KERNEL_LIST_FORMAT = "rawcoop-kernels/1"


def save_kernel_list(specs: list[KernelSpec], path: str) -> None:
    """Write ``specs`` as a kernel list that ``warmup --from`` reads: JSON,
    ``{"format": KERNEL_LIST_FORMAT, "kernels": [{"source", "name", "defines"}]}``."""
    doc = {"format": KERNEL_LIST_FORMAT,
           "kernels": [{"source": s.source, "name": s.name, "defines": dict(s.defines)} for s in specs]}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def load_kernel_list(path: str) -> list[KernelSpec]:
    """The configurations of a kernel list (:func:`save_kernel_list`); ValueError
    naming the file and what is wrong with it.  Sources are checked against
    kernels/ so a list from another rawcoop version fails here, not in a worker."""
    from . import sources
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise ValueError(f"kernel list {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise ValueError(f"kernel list {path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != KERNEL_LIST_FORMAT or not isinstance(doc.get("kernels"), list):
        raise ValueError(f"kernel list {path}: expected {{\"format\": \"{KERNEL_LIST_FORMAT}\", \"kernels\": [...]}} "
                         f"(written by `python -m rawcoop cache export`)")
    specs = []
    for i, k in enumerate(doc["kernels"]):
        ok = (isinstance(k, dict) and isinstance(k.get("source"), str) and isinstance(k.get("name"), str)
              and isinstance(k.get("defines"), dict)
              and all(isinstance(n, str) and isinstance(v, int) and not isinstance(v, bool)
                      for n, v in k["defines"].items()))
        if not ok:
            raise ValueError(f"kernel list {path}: entry {i} needs a source, a name and integer defines, got {k!r}")
        if not sources.exists(k["source"]):
            raise ValueError(f"kernel list {path}: entry {i}: no kernel source {k['source']!r} in this rawcoop")
        specs.append(KernelSpec.make(k["source"], k["name"], **k["defines"]))
    return list(dict.fromkeys(specs))           # each configuration once, in the list's order


def _describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"compiler process killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"compiler process killed by signal {-rc}"
    return f"compiler process exited with status {rc}"


def _run_worker(batch: list[tuple[int, KernelSpec]], timeout: float, arch: str,
                done: dict[int, Outcome], requeue, progress) -> None:
    payload = json.dumps([{"index": i, "source": s.source, "name": s.name,
                           "defines": [list(d) for d in s.defines], "arch": arch} for i, s in batch])
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""           # the worker never touches a GPU
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen([sys.executable, "-m", "rawcoop._compile_worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    specs = dict(batch)
    current: list[int | None] = [None]
    started = [time.perf_counter()]
    timed_out = [False]

    def watchdog():
        # Kill the worker if one configuration compiles for longer than `timeout`.
        while proc.poll() is None:
            if current[0] is not None and time.perf_counter() - started[0] > timeout:
                timed_out[0] = True
                proc.kill()
                return
            time.sleep(0.05)

    threading.Thread(target=watchdog, daemon=True).start()
    proc.stdin.write(payload)
    proc.stdin.close()
    for line in proc.stdout:
        tag, _, rest = line.strip().partition(" ")
        if tag == "START":
            current[0] = int(rest)
            started[0] = time.perf_counter()
        elif tag in ("DONE", "FAIL"):
            idx, _, js = rest.partition(" ")
            i = int(idx)
            info = json.loads(js)
            if tag == "DONE":
                done[i] = Outcome(specs[i], "compiled" if info["compiled"] else "hit", info["seconds"])
            else:
                done[i] = Outcome(specs[i], "failed", time.perf_counter() - started[0],
                                  info.get("error", "") + ("\n" + info["log"] if info.get("log") else ""))
            current[0] = None
            progress(1)
    rc = proc.wait()
    stderr = proc.stderr.read()
    if current[0] is not None:
        i = current[0]
        why = f"timed out after {timeout:.0f} s" if timed_out[0] else _describe_exit(rc)
        done[i] = Outcome(specs[i], "failed", time.perf_counter() - started[0],
                          why + (("\n" + stderr[-2000:]) if stderr.strip() else ""))
        progress(1)
    rest = [(i, s) for i, s in batch if i not in done]
    if rest:
        requeue(rest)


def warmup(specs: list[KernelSpec] | None = None, jobs: int | None = None, timeout: float = 600.0,
           arch: str = DEFAULT_ARCH, show_progress: bool = True) -> Report:
    from . import registry
    t0 = time.perf_counter()
    specs = list(specs if specs is not None else registry.all_specs())
    jobs = max(1, jobs or min(len(specs), os.cpu_count() or 1))
    cache = default_cache()
    done: dict[int, Outcome] = {}
    todo: list[tuple[int, KernelSpec]] = []
    corrupt: dict[int, str] = {}
    for i, s in enumerate(specs):
        state = cache.verify(s, arch)
        if state == "ok":
            done[i] = Outcome(s, "hit")
            continue
        if state != "missing":              # truncated, damaged or unreadable: rebuilt by a worker
            corrupt[i] = state.removeprefix("corrupt: ")
            cache.discard(s, arch)
        todo.append((i, s))
    try:
        from tqdm import tqdm
        bar = tqdm(total=len(specs), initial=len(done), desc="rawcoop warm-up", unit="kernel",
                   disable=not show_progress, leave=True)
    except ImportError:  # pragma: no cover
        bar = None
    lock = threading.Lock()

    def progress(n):
        if bar is not None:
            with lock:
                bar.update(n)

    queue: deque = deque()
    # Deal the configurations round-robin into `jobs` batches (one worker each).
    batches = [todo[k::jobs] for k in range(jobs)]
    queue.extend(b for b in batches if b)
    qlock = threading.Lock()

    def requeue(batch):
        with qlock:
            queue.append(batch)

    def drain():
        while True:
            with qlock:
                if not queue:
                    return
                batch = queue.popleft()
            _run_worker(batch, timeout, arch, done, requeue, progress)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for f in [pool.submit(drain) for _ in range(jobs)]:
            f.result()
        # A worker that crashed late may have re-queued work after others drained.
        while queue:
            drain()
    if bar is not None:
        bar.close()
    for i, why in corrupt.items():
        done[i].repaired = why
    report = Report([done[i] for i in range(len(specs))], time.perf_counter() - t0)
    return report
