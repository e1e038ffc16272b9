"""CPU: the on-disk cubin cache (rawcoop.cache) with real NVRTC compiles.

What the key covers, disk round trips, atomic publishing, corruption recovery,
failing compiles, untrusted/unwritable directories, the environment switches,
and several processes racing on one cold key.  Every cache lives under the
test's own tmp_path; kernels come from the real kernels/ folder or from a
temporary copy of it with throwaway sources added.
"""
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

import rawcoop
from rawcoop import cache as cache_mod
from rawcoop import compiler, sources, tile_copy
from rawcoop.cache import CacheWarning, KernelCache, cache_key
from rawcoop.compiler import DEFAULT_ARCH, KernelSpec, base_options, compile_spec

ROOT = Path(__file__).resolve().parents[2]
REAL_KERNELS = sources.kernels_dir()

SPEC = tile_copy.spec(2, 2)

TINY_CU = """\
#include "ptx.cuh"
#ifndef VALUE
#define VALUE 1
#endif
#ifndef TINY_BIAS
#define TINY_BIAS 0
#endif
extern "C" __global__ void tiny_kernel(u32* out) { out[0] = VALUE + TINY_BIAS; }
"""
BAD_CU = """\
extern "C" __global__ void bad_kernel(int* out) { out[0] = ; }
"""


def tiny(value: int = 1) -> KernelSpec:
    return KernelSpec.make("tiny.cu", "tiny_kernel", VALUE=value)


ENV_VARS = ("RAWCOOP_CACHE_IN_MEMORY", "RAWCOOP_ALWAYS_COMPILE", "RAWCOOP_DUMP_DIR",
            "RAWCOOP_LOCK_TIMEOUT", "RAWCOOP_LINEINFO", "RAWCOOP_LOCK_DIR")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for v in ENV_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("RAWCOOP_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("RAWCOOP_CACHE_DIR", str(tmp_path / "default-cache"))


@pytest.fixture
def kdir(tmp_path, monkeypatch):
    """A private copy of kernels/ plus throwaway sources, used by rawcoop.sources."""
    d = tmp_path / "kernels"
    shutil.copytree(REAL_KERNELS, d)
    (d / "tiny.cu").write_text(TINY_CU)
    (d / "bad.cu").write_text(BAD_CU)
    monkeypatch.setattr(sources, "kernels_dir", lambda: d)
    return d


@pytest.fixture
def cdir(tmp_path):
    return tmp_path / "cache"


def fresh(spec: KernelSpec, arch: str = DEFAULT_ARCH) -> bytes:
    return compile_spec(spec, arch).cubin


def rewrite(path: Path, text: str) -> None:
    """Change a source file (content and size), as an editor would."""
    path.write_text(text)


def entry_dir(directory: Path, key: str) -> Path:
    return directory / f"v{cache_mod.SCHEMA}" / key[:2]


def all_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


def assert_one_valid_entry(directory: Path, key: str, expected: bytes | None = None) -> dict:
    """The tree holds exactly <key>.json and one <key>-<sha16>.cubin that matches it."""
    d = entry_dir(directory, key)
    files = all_files(directory)
    names = sorted(p.name for p in files)
    assert len(files) == 2, names
    assert all(p.parent == d for p in files), files
    jsons = [p for p in files if p.name == f"{key}.json"]
    cubins = [p for p in files if p.name.startswith(f"{key}-") and p.name.endswith(".cubin")]
    assert len(jsons) == 1 and len(cubins) == 1, names
    assert not any(n.startswith(".") or n.endswith(".tmp") for n in names), names
    meta = json.loads(jsons[0].read_text())
    data = cubins[0].read_bytes()
    assert meta["cubin"] == cubins[0].name
    assert meta["size"] == len(data)
    assert meta["sha256"] == hashlib.sha256(data).hexdigest()
    assert cubins[0].name == f"{key}-{meta['sha256'][:16]}.cubin"
    assert meta["key"] == key and meta["schema"] == cache_mod.SCHEMA
    if expected is not None:
        assert data == expected
    return meta


def cache_warnings(record) -> list:
    return [w for w in record if issubclass(w.category, CacheWarning)]


# ====================================================================== keys
def test_key_is_stable_hex():
    k = cache_key(SPEC)
    assert len(k) == 64 and int(k, 16) >= 0
    assert cache_key(SPEC) == k
    assert cache_key(tile_copy.spec(2, 2)) == k


def test_key_changes_when_source_changes(kdir):
    k0 = cache_key(SPEC)
    assert k0 == cache_key(SPEC)  # the copy has the real content: same key as the real dir
    src = kdir / "tile_copy.cu"
    original = src.read_text()
    rewrite(src, original + "\n// an edit\n")
    k1 = cache_key(SPEC)
    assert k1 != k0
    rewrite(src, original.replace("kTileBytes", "kTileBytez"))  # same size, other content
    k2 = cache_key(SPEC)
    assert k2 not in (k0, k1)
    rewrite(src, original)
    assert cache_key(SPEC) == k0  # content addressed


def test_key_changes_when_included_header_changes(kdir):
    k_copy, k_tiny = cache_key(SPEC), cache_key(tiny())
    hdr = kdir / "ptx.cuh"
    original = hdr.read_text()
    rewrite(hdr, original + "\n// header edit\n")
    assert cache_key(SPEC) != k_copy
    assert cache_key(tiny()) != k_tiny
    rewrite(hdr, original)
    assert cache_key(SPEC) == k_copy and cache_key(tiny()) == k_tiny


def test_key_ignores_files_outside_the_include_closure(kdir):
    k_copy, k_tiny = cache_key(SPEC), cache_key(tiny())
    (kdir / "unrelated.cuh").write_text("// not included by anyone\n")
    rewrite(kdir / "bad.cu", BAD_CU + "// edit\n")
    assert cache_key(SPEC) == k_copy
    assert cache_key(tiny()) == k_tiny
    # but editing tiny.cu changes only tiny's key
    rewrite(kdir / "tiny.cu", TINY_CU + "// edit\n")
    assert cache_key(tiny()) != k_tiny
    assert cache_key(SPEC) == k_copy


def test_key_changes_with_defines(kdir):
    keys = {cache_key(tile_copy.spec(i, c)) for i in (1, 2, 4, 8) for c in (1, 2, 4)}
    assert len(keys) == 12
    assert cache_key(tiny(1)) != cache_key(tiny(2))
    assert cache_key(tiny(1)) == cache_key(tiny(1))
    # the kernel name is part of it as well
    assert cache_key(KernelSpec("tiny.cu", "tiny_kernel")) != cache_key(KernelSpec("tiny.cu", "other"))
    # no defines vs the default value spelled out: different option lists, different keys
    assert cache_key(KernelSpec("tiny.cu", "tiny_kernel")) != cache_key(tiny(1))


def test_key_changes_with_options(monkeypatch):
    k = cache_key(SPEC)
    assert cache_key(SPEC, options=base_options(DEFAULT_ARCH)) == k
    assert cache_key(SPEC, options=base_options(DEFAULT_ARCH) + ["-G"]) != k
    assert cache_key(SPEC, options=list(reversed(base_options(DEFAULT_ARCH)))) != k
    monkeypatch.setenv("RAWCOOP_LINEINFO", "1")
    assert "-lineinfo" in base_options(DEFAULT_ARCH)
    assert cache_key(SPEC) != k
    monkeypatch.delenv("RAWCOOP_LINEINFO")
    assert cache_key(SPEC) == k


def test_key_changes_with_nvrtc_version(monkeypatch):
    k = cache_key(SPEC)
    real = compiler.nvrtc_version()
    monkeypatch.setattr(cache_mod, "nvrtc_version", lambda: (real[0], real[1] + 1))
    k_minor = cache_key(SPEC, options=base_options(DEFAULT_ARCH))
    monkeypatch.setattr(cache_mod, "nvrtc_version", lambda: (real[0] + 1, real[1]))
    k_major = cache_key(SPEC, options=base_options(DEFAULT_ARCH))
    assert len({k, k_minor, k_major}) == 3
    monkeypatch.setattr(cache_mod, "nvrtc_version", lambda: real)
    assert cache_key(SPEC) == k


def test_key_changes_with_arch():
    k = cache_key(SPEC, "sm_90a")
    assert cache_key(SPEC) == k  # the default arch
    assert cache_key(SPEC, "sm_90") != k
    assert cache_key(SPEC, "sm_100a") != k
    # even with the options pinned, the arch itself is keyed
    opts = base_options("sm_90a")
    assert cache_key(SPEC, "sm_90", options=opts) != cache_key(SPEC, "sm_90a", options=opts)


def test_key_independent_of_kernels_dir_location(tmp_path, monkeypatch):
    real_keys = [cache_key(SPEC), cache_key(tile_copy.spec(4, 1))]
    seen = []
    for where in ("a", "deeper/b/c"):
        d = tmp_path / where / "kernels"
        shutil.copytree(REAL_KERNELS, d)
        monkeypatch.setattr(sources, "kernels_dir", lambda d=d: d)
        seen.append([cache_key(SPEC), cache_key(tile_copy.spec(4, 1))])
    assert seen[0] == seen[1] == real_keys


def test_edited_header_triggers_recompile_not_stale_cubin(kdir, cdir):
    c = KernelCache(directory=cdir)
    b1 = c.get(tiny(5))
    rewrite(kdir / "ptx.cuh", (kdir / "ptx.cuh").read_text() + "\n#define TINY_BIAS 1000\n")
    b2 = c.get(tiny(5))
    assert c.stats.compiled == 2 and c.stats.hits == 0
    assert b2 != b1 and b2 == fresh(tiny(5))
    assert len(list(cdir.rglob("*.json"))) == 2


# ====================================================================== round trip
def test_first_get_compiles_second_instance_loads_from_disk(cdir, monkeypatch):
    c1 = KernelCache(directory=cdir)
    b1 = c1.get(SPEC)
    assert (c1.stats.compiled, c1.stats.hits, c1.stats.corrupt) == (1, 0, 0)
    assert b1 == fresh(SPEC)
    assert b1[:4] == b"\x7fELF"
    assert c1.get(SPEC) is b1  # memory
    assert (c1.stats.compiled, c1.stats.hits) == (1, 1)
    assert c1.contains(SPEC)

    def no_compile(*a, **k):
        raise AssertionError("compiled although a valid entry is on disk")

    monkeypatch.setattr(cache_mod, "compile_spec", no_compile)
    c2 = KernelCache(directory=cdir)
    assert c2.contains(SPEC)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        b2 = c2.get(SPEC)
    assert b2 == b1
    assert (c2.stats.compiled, c2.stats.hits, c2.stats.corrupt) == (0, 1, 0)
    # the ptxas log travels with the entry
    assert "Used" in c2.log(SPEC) and c2.log(SPEC) == c1.log(SPEC)
    assert compiler.resource_usage(c2.log(SPEC))["registers"] > 0
    # a different spec is not on disk: this would need a compile
    with pytest.raises(AssertionError, match="compiled although"):
        c2.get(tile_copy.spec(2, 4))


def test_default_directory_comes_from_env(tmp_path, monkeypatch):
    d = tmp_path / "from-env"
    monkeypatch.setenv("RAWCOOP_CACHE_DIR", str(d))
    c = KernelCache()
    assert c.directory == d
    c.get(SPEC)
    assert_one_valid_entry(d, cache_key(SPEC), fresh(SPEC))


def test_atomic_publish_layout(cdir):
    c = KernelCache(directory=cdir)
    data = c.get(SPEC)
    key = cache_key(SPEC)
    meta = assert_one_valid_entry(cdir, key, data)
    assert meta["kernel"] == "tile_replicate" and meta["arch"] == DEFAULT_ARCH
    assert meta["label"] == SPEC.label
    assert meta["nvrtc"] == list(compiler.nvrtc_version())
    assert meta["options"] == base_options(DEFAULT_ARCH) + SPEC.define_options()
    # every directory the cache created is private, and so are the files
    d = entry_dir(cdir, key)
    for p in (cdir, cdir / f"v{cache_mod.SCHEMA}", d):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, (p, oct(p.stat().st_mode))
    for p in d.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    # a second key: another entry next to it, still no temp files
    other = tile_copy.spec(4, 4)
    c.get(other)
    assert len(all_files(cdir)) == 4
    assert not [p for p in cdir.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]
    assert {e["key"] for e in c.entries()} == {key, cache_key(other)}
    assert c.size_bytes() == sum(p.stat().st_size for p in all_files(cdir))


def test_atomic_write_leaves_no_temp_on_failure(tmp_path):
    target = tmp_path / "x.bin"
    with pytest.raises(TypeError):
        cache_mod._atomic_write(target, "not bytes")  # fails after the temp file exists
    assert list(tmp_path.iterdir()) == []
    cache_mod._atomic_write(target, b"payload")
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"] and target.read_bytes() == b"payload"


def test_publish_failure_falls_back_to_memory(cdir, monkeypatch):
    real_atomic = cache_mod._atomic_write
    calls = []

    def failing(path, data):
        calls.append(path.name)
        if path.suffix == ".json":
            raise OSError(28, "No space left on device")
        real_atomic(path, data)

    monkeypatch.setattr(cache_mod, "_atomic_write", failing)
    c = KernelCache(directory=cdir)
    with pytest.warns(CacheWarning, match="cannot write"):
        data = c.get(SPEC)
    assert data == fresh(SPEC)
    assert c.in_memory()
    assert not list(cdir.rglob("*.json"))
    # a reader of that directory finds no (half) entry and compiles
    c2 = KernelCache(directory=cdir)
    monkeypatch.setattr(cache_mod, "_atomic_write", real_atomic)
    assert c2.get(SPEC) == data and c2.stats.compiled == 1


# ====================================================================== corruption
def _truncate(cubin: Path, meta_path: Path):
    data = cubin.read_bytes()
    cubin.write_bytes(data[: len(data) // 2])


def _truncate_to_empty(cubin: Path, meta_path: Path):
    cubin.write_bytes(b"")


def _bitflip(cubin: Path, meta_path: Path):
    data = bytearray(cubin.read_bytes())
    data[len(data) // 2] ^= 0x01
    cubin.write_bytes(bytes(data))


def _garble_json(cubin: Path, meta_path: Path):
    raw = meta_path.read_bytes()
    meta_path.write_bytes(raw[: len(raw) // 2] + b"\xff\x00garbage")


def _json_not_an_object(cubin: Path, meta_path: Path):
    meta_path.write_text("[1, 2, 3]")


def _json_wrong_sha(cubin: Path, meta_path: Path):
    meta = json.loads(meta_path.read_text())
    meta["sha256"] = "0" * 64
    meta_path.write_text(json.dumps(meta))


def _json_missing_field(cubin: Path, meta_path: Path):
    meta = json.loads(meta_path.read_text())
    del meta["size"]
    meta_path.write_text(json.dumps(meta))


def _missing_cubin(cubin: Path, meta_path: Path):
    cubin.unlink()


def _cubin_name_escapes(cubin: Path, meta_path: Path):
    # a record naming a file outside the entry dir is refused even if that file is intact
    outside = cubin.parent.parent / cubin.name
    shutil.copy(cubin, outside)
    meta = json.loads(meta_path.read_text())
    meta["cubin"] = f"../{cubin.name}"
    meta_path.write_text(json.dumps(meta))


CORRUPTIONS = [_truncate, _truncate_to_empty, _bitflip, _garble_json, _json_not_an_object,
               _json_wrong_sha, _json_missing_field, _missing_cubin, _cubin_name_escapes]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_corrupt_entry_detected_removed_rebuilt(cdir, monkeypatch, corrupt):
    good = KernelCache(directory=cdir).get(SPEC)
    key = cache_key(SPEC)
    d = entry_dir(cdir, key)
    meta_path = d / f"{key}.json"
    (cubin,) = d.glob(f"{key}-*.cubin")
    corrupt(cubin, meta_path)

    real_compile = cache_mod.compile_spec
    seen_at_compile = []

    def checking_compile(spec, arch=DEFAULT_ARCH, *a, **k):
        # the bad entry must already be gone when the rebuild starts
        seen_at_compile.append(sorted(p.name for p in d.iterdir()))
        return real_compile(spec, arch, *a, **k)

    monkeypatch.setattr(cache_mod, "compile_spec", checking_compile)
    c = KernelCache(directory=cdir)
    with pytest.warns(CacheWarning, match="corrupt cache entry") as rec:
        data = c.get(SPEC)
    assert len(cache_warnings(rec)) == 1
    assert seen_at_compile == [[]]
    assert data == good == fresh(SPEC)
    assert (c.stats.corrupt, c.stats.compiled, c.stats.hits) == (1, 1, 0)
    # the rebuilt entry is whole again (the copy planted outside by one case aside)
    outside = d.parent / cubin.name
    if outside.exists():
        outside.unlink()
    assert_one_valid_entry(cdir, key, good)
    # and a later process loads it silently
    monkeypatch.setattr(cache_mod, "compile_spec", real_compile)
    c3 = KernelCache(directory=cdir)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        assert c3.get(SPEC) == good
    assert (c3.stats.hits, c3.stats.compiled, c3.stats.corrupt) == (1, 0, 0)


def test_stale_cubin_of_other_content_is_not_paired(cdir):
    """A leftover <key>-<othersha>.cubin next to a valid entry is ignored, and a
    record naming it (wrong sha) is rejected."""
    good = KernelCache(directory=cdir).get(SPEC)
    key = cache_key(SPEC)
    d = entry_dir(cdir, key)
    (d / f"{key}-{'f' * 16}.cubin").write_bytes(b"not a cubin")
    c = KernelCache(directory=cdir)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        assert c.get(SPEC) == good
    meta_path = d / f"{key}.json"
    meta = json.loads(meta_path.read_text())
    meta["cubin"] = f"{key}-{'f' * 16}.cubin"
    meta_path.write_text(json.dumps(meta))
    c = KernelCache(directory=cdir)
    with pytest.warns(CacheWarning, match="corrupt"):
        assert c.get(SPEC) == good
    assert_one_valid_entry(cdir, key, good)


# ====================================================================== failing compiles
def test_failing_compile_raises_compile_error_and_leaves_nothing(kdir, cdir):
    c = KernelCache(directory=cdir)
    spec = KernelSpec.make("bad.cu", "bad_kernel", FOO=3)
    with pytest.raises(rawcoop.CompileError) as info:
        c.get(spec)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.kernel == "bad_kernel"
    assert err.arch == DEFAULT_ARCH
    assert err.options == base_options(DEFAULT_ARCH) + ["-DFOO=3"]
    assert f"--gpu-architecture={DEFAULT_ARCH}" in err.options
    assert "bad.cu" in err.log and "error" in err.log
    assert "expected an expression" in err.log
    assert err.log.strip() in str(err) and "bad_kernel" in str(err)
    assert c.stats.compiled == 0
    files = all_files(cdir)
    assert not [p for p in files if p.suffix in (".cubin", ".json", ".tmp") or p.name.startswith(".")]
    assert not c.contains(spec)
    # the failure is not remembered: fixing the source makes the same spec compile
    rewrite(kdir / "bad.cu", BAD_CU.replace("= ;", "= FOO;"))
    assert c.get(spec) == fresh(spec)
    assert_one_valid_entry(cdir, cache_key(spec))


def test_compile_error_for_unsupported_arch(cdir):
    c = KernelCache(directory=cdir)
    with pytest.raises(rawcoop.CompileError, match="does not support") as info:
        c.get(SPEC, arch="sm_1a")
    assert info.value.arch == "sm_1a" and info.value.kernel == "tile_replicate"
    assert all_files(cdir) == []


def test_angle_bracket_include_rejected(kdir, cdir):
    (kdir / "fp16.cu").write_text('#include <cuda_fp16.h>\n'
                                  'extern "C" __global__ void k(__half* p) {}\n')
    with pytest.raises(ValueError, match=r"#include <cuda_fp16\.h>.*must not include"):
        sources.closure("fp16.cu")
    # also when a header pulls it in
    (kdir / "sneaky.cuh").write_text("#pragma once\n  #  include <cuda_fp16.h>\n")
    (kdir / "uses_sneaky.cu").write_text('#include "sneaky.cuh"\nextern "C" __global__ void k() {}\n')
    with pytest.raises(ValueError, match="sneaky.cuh: #include <cuda_fp16.h>"):
        sources.closure("uses_sneaky.cu")
    c = KernelCache(directory=cdir)
    with pytest.raises(ValueError, match="must not include"):
        c.get(KernelSpec("fp16.cu", "k"))
    with pytest.raises(ValueError, match="must not include"):
        c.get(KernelSpec("uses_sneaky.cu", "k"))
    assert all_files(cdir) == [] and c.stats.compiled == 0


def test_closure_lists_main_then_headers(kdir):
    files = sources.closure("tiny.cu")
    assert list(files) == ["tiny.cu", "ptx.cuh"]
    assert files["tiny.cu"] == TINY_CU


# ====================================================================== unusable directories
def _gets_warn_once(c: KernelCache, specs) -> tuple[list, list]:
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = [c.get(s) for s in specs]
    return out, cache_warnings(rec)


def test_directory_under_a_regular_file_works_in_memory(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    c = KernelCache(directory=blocker / "cache")
    specs = [SPEC, tile_copy.spec(2, 4), SPEC, tile_copy.spec(1, 1), tile_copy.spec(2, 4)]
    out, warns = _gets_warn_once(c, specs)
    assert len(warns) == 1, [str(w.message) for w in warns]
    assert "unusable" in str(warns[0].message)
    assert c.in_memory()
    assert (c.stats.compiled, c.stats.hits) == (3, 2)
    assert out[0] == out[2] == fresh(SPEC)
    assert out[1] == out[4] == fresh(tile_copy.spec(2, 4))
    assert blocker.read_text() == "x"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root ignores directory permissions")
def test_unwritable_parent_works_in_memory(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        c = KernelCache(directory=parent / "cache")
        out, warns = _gets_warn_once(c, [SPEC, tile_copy.spec(2, 4), SPEC])
        assert len(warns) == 1
        assert out[0] == out[2] == fresh(SPEC)
        assert not (parent / "cache").exists()
    finally:
        parent.chmod(0o700)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_group_or_other_writable_directory_is_untrusted(tmp_path, mode):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(mode)
    c = KernelCache(directory=d)
    out, warns = _gets_warn_once(c, [SPEC, tile_copy.spec(2, 4), SPEC])
    assert len(warns) == 1
    assert "writable by other users" in str(warns[0].message)
    assert c.in_memory()
    assert out[0] == out[2] == fresh(SPEC)
    assert list(d.iterdir()) == []
    assert stat.S_IMODE(d.stat().st_mode) == mode  # left as it was


def test_untrusted_directory_entries_are_not_read(tmp_path, monkeypatch):
    """A directory that became writable by others is not read from either:
    its (possibly planted) entries are ignored and nothing is written."""
    d = tmp_path / "was-private"
    good = KernelCache(directory=d).get(SPEC)
    before = {p: p.read_bytes() for p in all_files(d)}
    d.chmod(0o777)
    calls = []
    real = cache_mod.compile_spec
    monkeypatch.setattr(cache_mod, "compile_spec", lambda *a, **k: calls.append(1) or real(*a, **k))
    c = KernelCache(directory=d)
    out, warns = _gets_warn_once(c, [SPEC, SPEC])
    assert len(warns) == 1 and "writable by other users" in str(warns[0].message)
    assert out == [good, good]
    assert calls == [1] and (c.stats.compiled, c.stats.hits) == (1, 1)
    assert {p: p.read_bytes() for p in all_files(d)} == before


def test_directory_made_untrusted_during_compile_is_not_written(tmp_path, monkeypatch):
    """The publish step checks the directory again (it may appear, or change,
    while NVRTC runs)."""
    d = tmp_path / "appears"
    real = cache_mod.compile_spec

    def compile_then_plant(*a, **k):
        res = real(*a, **k)
        d.mkdir(exist_ok=True)
        d.chmod(0o777)
        return res

    monkeypatch.setattr(cache_mod, "compile_spec", compile_then_plant)
    c = KernelCache(directory=d)
    out, warns = _gets_warn_once(c, [SPEC, SPEC])
    assert len(warns) == 1 and "writable by other users" in str(warns[0].message)
    assert out[0] == out[1] == fresh(SPEC)
    assert list(d.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_directory_owned_by_another_user_is_untrusted(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    c = KernelCache(directory=d)
    out, warns = _gets_warn_once(c, [SPEC, SPEC])
    assert len(warns) == 1 and "owned by uid 65534" in str(warns[0].message)
    assert out[0] == fresh(SPEC)
    assert list(d.iterdir()) == []


# ====================================================================== environment
def test_in_memory_env_writes_nothing(tmp_path, monkeypatch, cdir):
    monkeypatch.setenv("RAWCOOP_CACHE_IN_MEMORY", "1")
    for c in (KernelCache(directory=cdir), KernelCache()):
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            a = c.get(SPEC)
            b = c.get(SPEC)
        assert a is b and a == fresh(SPEC)
        assert (c.stats.compiled, c.stats.hits) == (1, 1)
        assert c.in_memory()
    assert not cdir.exists()
    assert not (tmp_path / "default-cache").exists()
    assert not (tmp_path / "locks").exists()


def test_in_memory_argument_writes_nothing(cdir):
    c = KernelCache(directory=cdir, in_memory=True)
    assert c.get(SPEC) == fresh(SPEC)
    assert not cdir.exists()


def test_in_memory_env_ignores_existing_entries(cdir, monkeypatch):
    KernelCache(directory=cdir).get(SPEC)
    monkeypatch.setenv("RAWCOOP_CACHE_IN_MEMORY", "1")
    c = KernelCache(directory=cdir)
    c.get(SPEC)
    assert (c.stats.compiled, c.stats.hits) == (1, 0)


def test_always_compile_env_recompiles(cdir, monkeypatch):
    good = KernelCache(directory=cdir).get(SPEC)
    key = cache_key(SPEC)
    meta_before = json.loads((entry_dir(cdir, key) / f"{key}.json").read_text())
    monkeypatch.setenv("RAWCOOP_ALWAYS_COMPILE", "1")
    c = KernelCache(directory=cdir)
    assert c.get(SPEC) == good
    assert (c.stats.compiled, c.stats.hits) == (1, 0)
    assert c.get(SPEC) == good  # not even from memory
    assert (c.stats.compiled, c.stats.hits) == (2, 0)
    # still publishes: one entry, freshly written
    meta = assert_one_valid_entry(cdir, key, good)
    assert meta["created"] > meta_before["created"]
    monkeypatch.delenv("RAWCOOP_ALWAYS_COMPILE")
    c2 = KernelCache(directory=cdir)
    c2.get(SPEC)
    assert (c2.stats.compiled, c2.stats.hits) == (0, 1)


def test_dump_dir_receives_sources_options_log_ptx_cubin(tmp_path, kdir, cdir, monkeypatch):
    dump = tmp_path / "dump"
    monkeypatch.setenv("RAWCOOP_DUMP_DIR", str(dump))
    c = KernelCache(directory=cdir)
    data = c.get(SPEC)
    (out,) = [p for p in dump.iterdir()]
    assert out.is_dir() and out.name.startswith("tile_replicate-")
    names = {p.name for p in out.iterdir()}
    assert names == {"tile_copy.cu", "ptx.cuh", "options.txt", "nvrtc.log", "tile_replicate.ptx",
                     "tile_replicate.cubin"}
    assert (out / "tile_replicate.cubin").read_bytes() == data
    assert (out / "tile_copy.cu").read_text() == (kdir / "tile_copy.cu").read_text()
    assert (out / "ptx.cuh").read_text() == (kdir / "ptx.cuh").read_text()
    opts = (out / "options.txt").read_text().split()
    assert opts == base_options(DEFAULT_ARCH) + SPEC.define_options()
    assert "-DCLUSTER=2" in opts
    assert "tile_replicate" in (out / "nvrtc.log").read_text()
    ptx = (out / "tile_replicate.ptx").read_text()
    assert ".target sm_90a" in ptx and ".entry tile_replicate" in ptx
    # a second spec gets its own folder
    c.get(tiny(7))
    assert len(list(dump.iterdir())) == 2


# ====================================================================== concurrency
CHILD = textwrap.dedent("""
    import hashlib, json, sys, time, warnings
    from pathlib import Path
    from rawcoop import tile_copy
    from rawcoop.cache import CacheWarning, KernelCache, cache_key
    warnings.simplefilter("error", CacheWarning)
    spec = tile_copy.spec(2, 2)
    cache_key(spec)                      # load NVRTC, read sources: before the barrier
    cache = KernelCache(directory=sys.argv[1])
    start, ready = Path(sys.argv[2]), Path(sys.argv[3])
    ready.touch()
    deadline = time.monotonic() + 60
    while not start.exists():
        if time.monotonic() > deadline:
            sys.exit("barrier timeout")
        time.sleep(0.0005)
    data = cache.get(spec)
    print(json.dumps({"compiled": cache.stats.compiled, "hits": cache.stats.hits,
                      "corrupt": cache.stats.corrupt, "sha": hashlib.sha256(data).hexdigest()}))
""")


def _race(tmp_path: Path, n: int, lock_dir: Path) -> tuple[Path, list[dict]]:
    d = tmp_path / "shared-cache"
    sync = tmp_path / "sync"
    sync.mkdir()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAWCOOP_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["RAWCOOP_LOCK_DIR"] = str(lock_dir)
    env["RAWCOOP_CACHE_DIR"] = str(tmp_path / "unused-default")
    start = sync / "start"
    procs = [subprocess.Popen([sys.executable, str(script), str(d), str(start), str(sync / f"ready{i}")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(n)]
    try:
        deadline = time.monotonic() + 60
        while not all((sync / f"ready{i}").exists() for i in range(n)):
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, dead[0].communicate()
            assert time.monotonic() < deadline, "children did not get ready"
            time.sleep(0.005)
        start.touch()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return d, results


@pytest.mark.parametrize("n", [2, 4])
def test_processes_racing_on_a_cold_key_compile_once(tmp_path, n):
    d, results = _race(tmp_path, n, tmp_path / "race-locks")
    shas = {r["sha"] for r in results}
    assert shas == {hashlib.sha256(fresh(SPEC)).hexdigest()}
    assert sum(r["compiled"] for r in results) == 1, results
    assert sum(r["hits"] for r in results) == n - 1, results
    assert all(r["corrupt"] == 0 for r in results)
    assert_one_valid_entry(d, cache_key(SPEC), fresh(SPEC))


def test_processes_racing_without_a_usable_lock_still_agree(tmp_path):
    blocker = tmp_path / "lock-blocker"
    blocker.write_text("x")  # the lock dir cannot be created: no lock at all
    d, results = _race(tmp_path, 4, blocker / "locks")
    assert {r["sha"] for r in results} == {hashlib.sha256(fresh(SPEC)).hexdigest()}
    assert sum(r["compiled"] for r in results) >= 1
    assert all(r["corrupt"] == 0 for r in results)
    assert_one_valid_entry(d, cache_key(SPEC), fresh(SPEC))


def test_lock_timeout_compiles_anyway_with_warning(tmp_path, cdir, monkeypatch):
    from filelock import FileLock
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    monkeypatch.setenv("RAWCOOP_LOCK_TIMEOUT", "0.2")
    key = cache_key(SPEC)
    held = FileLock(str(lock_dir / f"{key}.lock"))
    held.acquire()
    try:
        c = KernelCache(directory=cdir)
        t0 = time.monotonic()
        with pytest.warns(CacheWarning, match="timed out waiting") as rec:
            data = c.get(SPEC)
        elapsed = time.monotonic() - t0
        assert len(cache_warnings(rec)) == 1
        assert 0.2 <= elapsed < 10
        assert data == fresh(SPEC)
        assert c.stats.compiled == 1
        assert_one_valid_entry(cdir, key, data)
        # another key is not blocked by this lock
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            c.get(tile_copy.spec(2, 4))
    finally:
        held.release()


def test_waiter_takes_entry_published_while_it_waited(tmp_path, cdir, monkeypatch):
    """Once the lock is ours, the entry another process published is used."""
    from filelock import FileLock
    import threading
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir(mode=0o700)
    key = cache_key(SPEC)
    held = FileLock(str(lock_dir / f"{key}.lock"))
    held.acquire()
    c = KernelCache(directory=cdir)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("data", c.get(SPEC)))
    t.start()
    try:
        time.sleep(0.2)
        assert t.is_alive()  # blocked on the lock
        other = KernelCache(directory=cdir, in_memory=False)
        # publish as "the other process" would, bypassing the lock we hold
        res = compile_spec(SPEC)
        other._publish(key, SPEC, DEFAULT_ARCH, res)
    finally:
        held.release()
    t.join(30)
    assert result["data"] == fresh(SPEC)
    assert (c.stats.compiled, c.stats.hits) == (0, 1)
