"""Environment variables, read when used (never at import time).

| variable                   | effect                                                        |
|----------------------------|---------------------------------------------------------------|
| RAWCOOP_CACHE_DIR          | cache directory (default ``$XDG_CACHE_HOME/rawcoop`` or ``~/.cache/rawcoop``) |
| RAWCOOP_CACHE_IN_MEMORY=1  | never touch the disk cache; compiled cubins live in memory      |
| RAWCOOP_ALWAYS_COMPILE=1   | ignore cached cubins (still publishes fresh ones)              |
| RAWCOOP_DUMP_DIR           | write the source, PTX, NVRTC log and cubin of every compile there |
| RAWCOOP_LOCK_DIR           | node-local directory for per-key compile locks (default: a per-user dir under the temp dir) |
| RAWCOOP_LOCK_TIMEOUT       | seconds to wait for another process's compile (default 300), then compile anyway |
| RAWCOOP_LINEINFO=1         | compile with ``-lineinfo`` (for ncu / compute-sanitizer source views) |
| RAWCOOP_WATCHDOG=1 or N    | kernels trap, printing the barrier's name, when one wait exceeds ~10 s (or N clock cycles) |
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> Path:
    explicit = os.environ.get("RAWCOOP_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "rawcoop"


def cache_in_memory() -> bool:
    return _flag("RAWCOOP_CACHE_IN_MEMORY")


def always_compile() -> bool:
    return _flag("RAWCOOP_ALWAYS_COMPILE")


def dump_dir() -> Path | None:
    d = os.environ.get("RAWCOOP_DUMP_DIR")
    return Path(d).expanduser() if d else None


def lock_dir() -> Path:
    d = os.environ.get("RAWCOOP_LOCK_DIR")
    if d:
        return Path(d).expanduser()
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"rawcoop-locks-{uid}"


def lock_timeout() -> float:
    try:
        return float(os.environ.get("RAWCOOP_LOCK_TIMEOUT", "300"))
    except ValueError:
        return 300.0


def lineinfo() -> bool:
    return _flag("RAWCOOP_LINEINFO")


def watchdog_cycles() -> int:
    """0 when off; else the clock-cycle budget of a single barrier wait."""
    v = os.environ.get("RAWCOOP_WATCHDOG", "").strip().lower()
    if v in ("", "0", "false", "no", "off"):
        return 0
    if v in ("1", "true", "yes", "on"):
        return 20_000_000_000          # ~10 s at ~2 GHz
    try:
        return max(1000, int(v))
    except ValueError:
        return 20_000_000_000
