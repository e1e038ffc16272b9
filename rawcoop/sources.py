"""Where the device sources are, and which files a kernel source pulls in.

The ``.cu``/``.cuh`` files live in the top-level ``kernels/`` folder of a
checkout; a wheel ships them as ``rawcoop/kernels``.  Both are found the same
way.  Only our own headers may be included (``#include "name.cuh"``); kernel
sources need no CUDA headers, so angle-bracket includes are rejected.  An
include may also sit inside a function body (gemm.cu includes its role files
inside gemm_kernel); :func:`closure` follows every ``#include`` line alike, so
the cache key covers them all.
"""
from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def kernels_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "kernels", here.parent / "kernels"):
        if candidate.is_dir() and any(candidate.glob("*.cu")):
            return candidate
    raise FileNotFoundError(
        f"rawcoop's kernel sources were not found next to {here} "
        "(expected rawcoop/kernels in a wheel or kernels/ in a checkout)")


def exists(relpath: str) -> bool:
    """Whether ``relpath`` names a file under kernels/ (relative, no ``..``)."""
    p = Path(relpath)
    return not p.is_absolute() and ".." not in p.parts and (kernels_dir() / p).is_file()


@lru_cache(maxsize=None)
def _read(path: Path, mtime_ns: int) -> str:
    return path.read_text(encoding="utf-8")


def read(relpath: str) -> str:
    p = kernels_dir() / relpath
    return _read(p, p.stat().st_mtime_ns)


def closure(main: str) -> dict[str, str]:
    """``{relative path: text}`` of ``main`` and every header it includes,
    transitively, in first-seen order.  The relative paths (never absolute
    ones) are what the cache key and NVRTC's include names use."""
    out: dict[str, str] = {}
    todo = [main]
    while todo:
        rel = todo.pop(0)
        if rel in out:
            continue
        text = read(rel)
        out[rel] = text
        for bracket, name in _INCLUDE.findall(text):
            if bracket == "<":
                raise ValueError(
                    f"{rel}: #include <{name}>: kernel sources must not include system/CUDA "
                    "headers (NVRTC 13 ships none built in); declare what is needed")
            todo.append(name)
    return out


def digest(files: dict[str, str]) -> dict[str, str]:
    return {rel: hashlib.sha256(text.encode()).hexdigest() for rel, text in files.items()}
