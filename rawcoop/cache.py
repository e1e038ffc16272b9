"""On-disk cache of compiled cubins, safe under concurrency and corruption.

Layout (``config.cache_dir()``, created 0700 on first write, never at import)::

    <dir>/v1/<key[:2]>/<key>.json               metadata record, written last
    <dir>/v1/<key[:2]>/<key>-<sha16>.cubin      the cubin, named by its content

The key is a sha256 over: the schema version, every kernel source and header
the kernel uses (by relative path and content), the kernel name and defines,
the arch, the NVRTC version and the compile options.

Publishing: cubin to a temp file in the same directory, fsync, ``os.replace``;
then the metadata record (size, sha256, cubin file name) the same way.  A
reader trusts an entry only if the record parses and the cubin it names has
that size and sha256; anything else is warned about, removed and rebuilt.
Because the cubin's file name carries its hash, two processes publishing the
same key at once can never pair one's record with the other's cubin.

A per-key :class:`filelock.FileLock` in a node-local directory
(``config.lock_dir()``) makes concurrent processes compile a key once; on a
lock timeout or an unusable lock directory we compile anyway: correctness
never depends on the lock.

If the cache directory cannot be created or written, or is not private to us
(owned by another user, or writable by group/others), the cache works in
memory and warns once.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from . import config, sources
from .compiler import (DEFAULT_ARCH, CompileResult, KernelSpec, base_options, compile_spec, nvrtc_version,
                       resource_usage_of)

SCHEMA = 1


class CacheWarning(UserWarning):
    pass


class CorruptEntry(ValueError):
    """A cache entry on disk that cannot be trusted (``foreign``: owned by
    another user, so neither used nor removed)."""

    def __init__(self, reason: str, foreign: bool = False):
        super().__init__(reason)
        self.foreign = foreign


@dataclass
class CacheStats:
    hits: int = 0
    compiled: int = 0
    corrupt: int = 0


def cache_key(spec: KernelSpec, arch: str = DEFAULT_ARCH, options: list[str] | None = None) -> str:
    files = sources.closure(spec.source)
    record = {
        "schema": SCHEMA,
        "sources": sources.digest(files),
        "kernel": spec.name,
        "main": spec.source,
        "defines": [list(d) for d in spec.defines],
        "arch": arch,
        "nvrtc": list(nvrtc_version()),
        "options": list(options if options is not None else base_options(arch)),
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def file_lock(name: str, on_timeout: str, stacklevel: int = 3):
    """Hold the node-local file lock ``<config.lock_dir()>/<name>.lock`` (a
    :class:`filelock.FileLock`, waiting at most ``config.lock_timeout()``
    seconds) while the ``with`` body runs.

    Best effort, never an error: the lock directory is created 0700 first;
    without ``filelock``, with an unusable lock directory or when acquiring
    fails the body runs unlocked, and after a timeout it runs unlocked with a
    :class:`CacheWarning` "timed out waiting for another process <on_timeout>"
    (``stacklevel`` 3 names the line of the ``with``).  Callers must stay
    correct without the lock (atomic publishes)."""
    try:
        from filelock import FileLock, Timeout
    except ImportError:  # pragma: no cover - filelock is a dependency
        yield
        return
    ldir = config.lock_dir()
    try:
        ldir.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = FileLock(str(ldir / f"{name}.lock"), timeout=config.lock_timeout())
    except (OSError, ValueError):
        yield
        return
    acquired = False
    try:
        lock.acquire()
        acquired = True
    except Timeout:
        warnings.warn(f"rawcoop: timed out waiting for another process {on_timeout}", CacheWarning,
                      stacklevel=stacklevel)
    except OSError:
        pass
    try:
        yield
    finally:
        if acquired:
            lock.release()


class KernelCache:
    """Compiled cubins by key: memory first, then disk, then NVRTC."""

    def __init__(self, directory: Path | str | None = None, in_memory: bool | None = None):
        self._explicit_dir = Path(directory) if directory is not None else None
        self._force_memory = in_memory
        self._memory: dict[str, bytes] = {}
        self._logs: dict[str, str] = {}
        self._resources: dict[str, dict | None] = {}
        self._mutex = threading.Lock()
        self._fallback_reason: str | None = None
        self.stats = CacheStats()

    # ----------------------------------------------------------------- where
    @property
    def directory(self) -> Path:
        return self._explicit_dir if self._explicit_dir is not None else config.cache_dir()

    @property
    def root(self) -> Path:
        return self.directory / f"v{SCHEMA}"

    def in_memory(self) -> bool:
        if self._force_memory is not None:
            return self._force_memory
        return config.cache_in_memory() or self._fallback_reason is not None

    def _fall_back(self, reason: str) -> None:
        if self._fallback_reason is None:
            self._fallback_reason = reason
            warnings.warn(f"rawcoop: kernel cache {self.directory} unusable ({reason}); "
                          "compiled kernels are kept in memory for this process", CacheWarning,
                          stacklevel=4)

    def _trusted(self, path: Path, st: os.stat_result) -> bool:
        """True if ``path`` is ours and not writable by others (else fall back
        to memory: entries in such a directory could have been planted)."""
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            self._fall_back(f"{path} is owned by uid {st.st_uid}, not by us")
            return False
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            self._fall_back(f"{path} is writable by other users")
            return False
        return True

    def _ensure_private_dir(self, path: Path) -> bool:
        """Create ``path`` (0700) if needed; True if it is ours and private."""
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = path.stat()
        except OSError as e:
            self._fall_back(f"cannot create: {e.strerror or e}")
            return False
        if not self._trusted(path, st):
            return False
        if not os.access(path, os.W_OK | os.X_OK):
            self._fall_back(f"{path} is not writable")
            return False
        return True

    def _private_for_read(self) -> bool:
        """False (and fall back to memory) if the existing cache directory is
        not trusted; True when there is nothing there yet."""
        try:
            st = self.directory.stat()
        except OSError:
            return True  # nothing there to read; _publish decides about creating it
        return self._trusted(self.directory, st)

    def _entry_dir(self, key: str) -> Path:
        return self.root / key[:2]

    # ----------------------------------------------------------------- read
    def _remove_entry(self, key: str) -> None:
        d = self._entry_dir(key)
        for p in list(d.glob(f"{key}.json")) + list(d.glob(f"{key}-*.cubin")):
            try:
                p.unlink()
            except OSError:
                pass

    def _read_entry(self, key: str) -> tuple[bytes, dict] | None:
        """The entry's cubin and metadata record, verified (the record parses,
        names a cubin in the entry's directory, and that cubin has the
        recorded size and sha256); None when there is no record.  Raises
        :class:`CorruptEntry` saying what is wrong."""
        d = self._entry_dir(key)
        meta_path = d / f"{key}.json"
        try:
            meta_raw = meta_path.read_bytes()
            st = meta_path.stat()
        except OSError:
            return None
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise CorruptEntry(f"{meta_path} is owned by uid {st.st_uid}, not by us", foreign=True)
        try:
            meta = json.loads(meta_raw)
            if Path(meta["cubin"]).name != meta["cubin"]:
                raise ValueError("cubin name escapes the entry directory")
            data = (d / meta["cubin"]).read_bytes()
            if len(data) != meta["size"]:
                raise ValueError(f"size {len(data)} != recorded {meta['size']}")
            if hashlib.sha256(data).hexdigest() != meta["sha256"]:
                raise ValueError("sha256 mismatch")
        except (ValueError, KeyError, TypeError, OSError) as e:
            named = isinstance(e, (KeyError, TypeError))        # a bare "'size'" says nothing on its own
            raise CorruptEntry(f"{type(e).__name__}: {e}" if named else str(e)) from None
        return data, meta

    def _load(self, key: str) -> bytes | None:
        try:
            entry = self._read_entry(key)
        except CorruptEntry as e:
            if e.foreign:
                warnings.warn(f"rawcoop: ignoring cache entry {key[:16]}…: {e}", CacheWarning, stacklevel=4)
                return None
            self.stats.corrupt += 1
            warnings.warn(f"rawcoop: corrupt cache entry {key[:16]}… in {self._entry_dir(key)} ({e}); removing "
                          "and rebuilding", CacheWarning, stacklevel=4)
            self._remove_entry(key)
            return None
        if entry is None:
            return None
        data, meta = entry
        log = meta.get("log", "")
        self._keep(key, data, log if isinstance(log, str) else "", meta.get("resources"))
        return data

    def _keep(self, key: str, cubin: bytes, log: str, resources) -> None:
        """Remember one entry in memory: its cubin, log and resource usage
        travel together, whichever way the entry came (disk or compile)."""
        if not isinstance(resources, dict) or "registers" not in resources:
            resources = None                # an entry written without them: derived on first use
        self._memory[key] = cubin
        self._logs[key] = log
        self._resources[key] = resources

    # ----------------------------------------------------------------- write
    def _publish(self, key: str, spec: KernelSpec, arch: str, result: CompileResult) -> None:
        if not self._ensure_private_dir(self.directory):
            return
        d = self._entry_dir(key)
        try:
            self.root.mkdir(mode=0o700, exist_ok=True)  # parents=True would make it 0777 & ~umask
            d.mkdir(mode=0o700, exist_ok=True)
            sha = hashlib.sha256(result.cubin).hexdigest()
            cubin_name = f"{key}-{sha[:16]}.cubin"
            _atomic_write(d / cubin_name, result.cubin)
            meta = {
                "schema": SCHEMA, "key": key, "kernel": spec.name, "label": spec.label,
                "source": spec.source, "defines": [list(d) for d in spec.defines],
                "arch": arch, "nvrtc": list(nvrtc_version()), "options": result.options,
                "cubin": cubin_name, "size": len(result.cubin), "sha256": sha,
                "compile_seconds": round(result.seconds, 4), "created": time.time(),
                "log": result.log, "resources": result.resources,
            }
            if result.log_note:
                meta["log_note"] = result.log_note
            _atomic_write(d / f"{key}.json", json.dumps(meta, indent=1).encode())
        except OSError as e:
            self._fall_back(f"cannot write: {e.strerror or e}")

    # ----------------------------------------------------------------- main
    def get(self, spec: KernelSpec, arch: str = DEFAULT_ARCH) -> bytes:
        """The cubin for ``spec``: from memory, disk, or a fresh compile."""
        key = cache_key(spec, arch)
        with self._mutex:
            hit = self._memory.get(key)
            if hit is not None and not config.always_compile():
                self.stats.hits += 1
                return hit
            use_disk = not self.in_memory() and self._private_for_read()
            if use_disk and not config.always_compile():
                data = self._load(key)
                if data is not None:
                    self.stats.hits += 1
                    return data
            if not use_disk:
                result = compile_spec(spec, arch)
                return self._remember(key, result)
            with self._compile_lock(key):
                if not config.always_compile():
                    data = self._load(key)  # someone else compiled it while we waited
                    if data is not None:
                        self.stats.hits += 1
                        return data
                result = compile_spec(spec, arch)
                self._publish(key, spec, arch, result)
                return self._remember(key, result)

    def _remember(self, key: str, result: CompileResult) -> bytes:
        self._keep(key, result.cubin, result.log, result.resources)
        self.stats.compiled += 1
        return result.cubin

    def log(self, spec: KernelSpec, arch: str = DEFAULT_ARCH) -> str:
        """The NVRTC/ptxas log of the cached build: the same text whether the
        entry was compiled in this process, loaded from disk or found in
        memory (it is stored with the cubin).  Which process built the entry
        decides what the log holds (NVRTC's log can come back without ptxas's
        report); :meth:`resource_usage` does not depend on it."""
        key = cache_key(spec, arch)
        if key not in self._logs:
            self.get(spec, arch)
        return self._logs.get(key, "")

    def resource_usage(self, spec: KernelSpec, arch: str = DEFAULT_ARCH) -> dict:
        """``compiler.resource_usage_of`` of the cached build (registers,
        stack frame, spill bytes, static shared memory, and their source),
        recorded in the entry when it was compiled; for an entry written
        without it, derived from its cubin and log."""
        key = cache_key(spec, arch)
        if key not in self._memory:
            self.get(spec, arch)
        usage = self._resources.get(key)
        if usage is None:
            usage = self._resources[key] = resource_usage_of(self._memory[key], self._logs.get(key, ""), spec.name)
        return dict(usage)

    def _compile_lock(self, key: str):
        return file_lock(key, f"compiling {key[:16]}…; compiling here too", stacklevel=5)

    # ----------------------------------------------------------------- admin
    def verify(self, spec: KernelSpec, arch: str = DEFAULT_ARCH) -> str:
        """``"ok"`` when the cache holds a sound build of ``spec`` (on disk:
        the cubin its record names, with the recorded size and sha256; for a
        cache kept in memory, in memory), ``"missing"``, or why the entry on
        disk cannot be used (``"corrupt: size 10 != recorded 2000"``).  Reads
        and hashes the cubin; changes nothing."""
        key = cache_key(spec, arch)
        if self.in_memory() or not self._private_for_read():
            return "ok" if key in self._memory else "missing"
        try:
            return "ok" if self._read_entry(key) is not None else "missing"
        except CorruptEntry as e:
            return f"corrupt: {e}"

    def discard(self, spec: KernelSpec, arch: str = DEFAULT_ARCH) -> None:
        """Forget the build of ``spec``: from memory and, when it is ours, from disk."""
        key = cache_key(spec, arch)
        for table in (self._memory, self._logs, self._resources):
            table.pop(key, None)
        if not self.in_memory():
            self._remove_entry(key)

    def contains(self, spec: KernelSpec, arch: str = DEFAULT_ARCH) -> bool:
        """Whether :meth:`verify` finds a sound build of ``spec``."""
        return self.verify(spec, arch) == "ok"

    def entries(self) -> list[dict]:
        out = []
        if not self.root.is_dir():
            return out
        for meta in sorted(self.root.glob("*/*.json")):
            try:
                out.append(json.loads(meta.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def specs(self) -> tuple[list[KernelSpec], int]:
        """The kernel configurations of the entries on disk, each once, and how
        many entries could not say theirs (written before entries recorded
        their source and defines)."""
        out, unknown = [], 0
        for e in self.entries():
            if not isinstance(e.get("source"), str) or not isinstance(e.get("defines"), list):
                unknown += 1
                continue
            out.append(KernelSpec.make(e["source"], e["kernel"], **dict(e["defines"])))
        return list(dict.fromkeys(out)), unknown

    def size_bytes(self) -> int:
        if not self.root.is_dir():
            return 0
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())

    def clear(self) -> int:
        """Remove every entry; returns the number of files removed."""
        n = 0
        if self.root.is_dir():
            for p in sorted(self.root.rglob("*"), reverse=True):
                try:
                    if p.is_dir():
                        p.rmdir()
                    else:
                        p.unlink()
                        n += 1
                except OSError:
                    pass
        for table in (self._memory, self._logs, self._resources):
            table.clear()
        return n


_default: KernelCache | None = None


def default_cache() -> KernelCache:
    global _default
    if _default is None:
        _default = KernelCache()
    return _default
