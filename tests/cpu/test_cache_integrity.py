"""CPU: the kernel cache's entries are verified, and what a kernel uses does
not depend on the compile log.

Warm-up counts an entry as a hit only when the cubin its record names has the
recorded size and sha256; a truncated, altered, missing or unreadable entry is
removed, rebuilt and reported.  Every entry records its resource usage
(registers, stack frame, spill bytes, static shared memory) when it is
compiled; where NVRTC's log has no ptxas report, the cubin's own attributes
give the same numbers (rawcoop/cubin.py, checked here against ptxas's report
on kernels with and without spills, local arrays, calls and shared memory).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rawcoop import cache as cache_mod
from rawcoop import compiler, cubin, tile_copy
from rawcoop.cache import KernelCache, cache_key
from rawcoop.warmup import warmup

ROOT = Path(__file__).resolve().parents[2]
SPECS = [tile_copy.spec(isz, 2) for isz in tile_copy.SUPPORTED_ITEMSIZES] + [tile_copy.spec(2, 4)]


@pytest.fixture
def cdir(tmp_path, monkeypatch):
    """A private cache directory and a fresh default cache for this test."""
    d = tmp_path / "cache"
    monkeypatch.setenv("RAWCOOP_CACHE_DIR", str(d))
    monkeypatch.setattr(cache_mod, "_default", None)
    return d


def _entry(d: Path, spec):
    key = cache_key(spec)
    meta_path = d / "v1" / key[:2] / f"{key}.json"
    meta = json.loads(meta_path.read_text())
    return meta_path, meta_path.parent / meta["cubin"], meta


def _truncate(d, spec):
    _, cub, _ = _entry(d, spec)
    cub.write_bytes(cub.read_bytes()[:100])


def _flip_a_byte(d, spec):
    _, cub, _ = _entry(d, spec)
    data = bytearray(cub.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cub.write_bytes(bytes(data))


def _break_the_record(d, spec):
    meta_path, _, _ = _entry(d, spec)
    meta_path.write_text(meta_path.read_text()[:40])


def _delete_the_cubin(d, spec):
    _entry(d, spec)[1].unlink()


DAMAGE = {"truncated": (_truncate, "size 100 != recorded"), "altered": (_flip_a_byte, "sha256 mismatch"),
          "record": (_break_the_record, ""), "deleted": (_delete_the_cubin, "No such file")}


def test_warmup_rebuilds_and_reports_each_damaged_entry(cdir):
    first = warmup(SPECS, jobs=2, show_progress=False)
    assert [o.status for o in first.outcomes] == ["compiled"] * len(SPECS) and not first.repaired
    damaged = dict(zip(DAMAGE, SPECS))              # one kind of damage per entry; SPECS[-1] stays sound
    for kind, spec in damaged.items():
        DAMAGE[kind][0](cdir, spec)
        assert KernelCache(cdir).verify(spec).startswith("corrupt: "), kind
    assert KernelCache(cdir).verify(SPECS[-1]) == "ok"

    second = warmup(SPECS, jobs=2, show_progress=False)
    by_spec = {o.spec: o for o in second.outcomes}
    for kind, spec in damaged.items():
        o = by_spec[spec]
        assert o.status == "compiled" and DAMAGE[kind][1] in o.repaired and o.repaired, (kind, o)
    assert by_spec[SPECS[-1]].status == "hit" and not by_spec[SPECS[-1]].repaired
    assert f"{len(damaged)} corrupt cache entries rebuilt" in second.summary()
    assert second.to_json()["repaired"] == len(damaged)

    third = warmup(SPECS, jobs=2, show_progress=False)
    assert [o.status for o in third.outcomes] == ["hit"] * len(SPECS) and not third.repaired
    assert all(KernelCache(cdir).verify(s) == "ok" for s in SPECS)


def test_warmup_cli_names_the_rebuilt_entry(tmp_path):
    env = dict(os.environ, RAWCOOP_CACHE_DIR=str(tmp_path / "c"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    label = tile_copy.spec(4, 1).label
    cmd = [sys.executable, "-m", "rawcoop", "warmup", "--quiet", "--kernel", label]
    r1 = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r1.returncode == 0 and "1 compiled" in r1.stdout, r1.stderr
    _truncate(tmp_path / "c", tile_copy.spec(4, 1))
    r2 = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r2.returncode == 0, r2.stderr
    assert f"REBUILT {label}: its cache entry was unusable (size 100 != recorded" in r2.stderr
    assert "0 cache hits, 1 compiled" in r2.stdout and "1 corrupt cache entries rebuilt" in r2.stdout


def test_verify_missing_ok_and_memory_only(cdir):
    spec = SPECS[0]
    c = KernelCache(cdir)
    assert c.verify(spec) == "missing" and not c.contains(spec)
    c.get(spec)
    assert c.verify(spec) == "ok" and c.contains(spec)
    c.discard(spec)
    assert c.verify(spec) == "missing" and not list(cdir.rglob("*.cubin"))
    m = KernelCache(cdir, in_memory=True)
    assert m.verify(spec) == "missing"
    m.get(spec)
    assert m.verify(spec) == "ok"


# ---------------------------------------------------------------- resource usage without the log
def test_each_entry_records_its_resource_usage(cdir):
    spec = SPECS[1]
    c = KernelCache(cdir)
    c.get(spec)
    _, _, meta = _entry(cdir, spec)
    usage = meta["resources"]
    assert usage["source"] == "ptxas" and usage["registers"] > 0
    assert usage == c.resource_usage(spec) == compiler.resource_usage_of(
        Path(_entry(cdir, spec)[1]).read_bytes(), "", spec.name) | {"source": "ptxas"}
    assert "log_note" not in meta


def test_log_and_usage_are_the_same_whichever_way_the_entry_came(cdir):
    spec = SPECS[2]
    compiled = KernelCache(cdir)
    compiled.get(spec)                                 # compiled in this process
    from_disk = KernelCache(cdir)
    from_disk.get(spec)                                # loaded from disk
    assert from_disk.stats.hits == 1 and from_disk.stats.compiled == 0
    from_disk.get(spec)                                # then from memory
    for c in (compiled, from_disk):
        assert c.log(spec) == compiled.log(spec) and "Used" in c.log(spec)
        assert c.resource_usage(spec) == compiled.resource_usage(spec)


def test_an_empty_nvrtc_log_is_noted_and_the_cubin_still_answers(cdir, monkeypatch):
    """NVRTC once returned empty logs in a process where torch had initialised
    CUDA: the entry notes it, and its resource usage comes from the cubin."""
    spec = SPECS[3]
    real = compiler.compile_spec(spec)
    monkeypatch.setattr(compiler, "_log", lambda prog: "")
    c = KernelCache(cdir)
    c.get(spec)
    _, _, meta = _entry(cdir, spec)
    assert meta["log"] == "" and "empty log" in meta["log_note"] and "torch imported" in meta["log_note"]
    usage = c.resource_usage(spec)
    assert usage["source"] == "cubin"
    assert {k: usage[k] for k in compiler.USAGE_KEYS} == {k: real.resources[k] for k in compiler.USAGE_KEYS}
    assert KernelCache(cdir).resource_usage(spec) == usage       # from the record, in another cache


def test_an_entry_without_recorded_usage_derives_it(cdir):
    spec = SPECS[0]
    KernelCache(cdir).get(spec)
    meta_path, _, meta = _entry(cdir, spec)
    want = meta.pop("resources")
    meta_path.write_text(json.dumps(meta))
    assert KernelCache(cdir).resource_usage(spec) == want


def _nvrtc(src: str, name: str, extra=()) -> tuple[bytes, str]:
    """Compile a throwaway kernel with rawcoop's own NVRTC options."""
    from rawcoop._cuda import nvrtc, nvrtc_check
    opts = compiler.base_options() + list(extra)
    prog = nvrtc_check(nvrtc.nvrtcCreateProgram(src.encode(), b"probe.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        ret = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = compiler._log(prog)
        assert ret[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS, log
        buf = compiler._out_buffer(nvrtc_check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize"))
        nvrtc_check(nvrtc.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return bytes(buf), log


_HEAVY = """extern "C" __global__ void heavy(const float* __restrict__ x, float* y) {
  float acc[96];
  #pragma unroll
  for (int j = 0; j < 96; j++) acc[j] = x[j * 1024 + threadIdx.x];
  #pragma unroll
  for (int r = 0; r < 8; r++) {
    #pragma unroll
    for (int j = 0; j < 96; j++) acc[j] = acc[j] * acc[(j + r + 1) % 96] + x[r * 96 + j];
  }
  float s = 0;
  #pragma unroll
  for (int j = 0; j < 96; j++) s += acc[j] * (j + 1);
  y[threadIdx.x] = s;
}"""
PROBES = {
    "tiny": ('extern "C" __global__ void tiny(float* p) { p[threadIdx.x] = 1.f; }', "tiny", ()),
    "static smem": ('extern "C" __global__ void st(float* p) { __shared__ float s[300]; s[threadIdx.x] = p[0]; '
                    '__syncthreads(); p[threadIdx.x] = s[(threadIdx.x + 1) % 300]; }', "st", ()),
    "local array": ('extern "C" __global__ void la(float* p, int i) { float a[1000]; for (int j = 0; j < 1000; j++) '
                    'a[j] = p[j]; p[threadIdx.x] = a[i % 1000] + a[(i * 7) % 1000]; }', "la", ()),
    "no spills": (_HEAVY, "heavy", ()),
    "spills": (_HEAVY, "heavy", ("--maxrregcount=32",)),
    "call": ('__device__ __noinline__ float g(float a, float* p) { float t[16]; for (int i = 0; i < 16; i++) '
             't[i] = p[i] * a; return t[(int)a & 15]; }\n'
             'extern "C" __global__ void calls(float* p) { p[threadIdx.x] = g(p[1], p) + g(p[2], p); }', "calls", ()),
    "second kernel": ('extern "C" __global__ void one(float* p) { p[0] = 1; }\n'
                      'extern "C" __global__ void two(float* p) { __shared__ int s[33]; s[threadIdx.x % 33] = 1; '
                      '__syncthreads(); p[threadIdx.x] = s[3]; }', "two", ()),
}


@pytest.mark.parametrize("probe", PROBES)
def test_the_cubin_agrees_with_ptxas(probe):
    src, name, extra = PROBES[probe]
    data, log = _nvrtc(src, name, extra)
    ptxas = compiler.resource_usage_of(data, log, name)
    assert ptxas["source"] == "ptxas", log
    found = cubin.kernel_resources(data, name)
    assert (found["registers"], found["stack"], found["static_smem"]) == \
        (ptxas["registers"], ptxas["stack"], ptxas["static_smem"]), (log, found)
    from_cubin = compiler.resource_usage_of(data, "", name)
    assert from_cubin["source"] == "cubin"
    if ptxas["stack"] == 0:
        assert {k: from_cubin[k] for k in compiler.USAGE_KEYS} == {k: ptxas[k] for k in compiler.USAGE_KEYS}
    else:                                              # a frame: spill bytes are unknown without ptxas's report
        assert from_cubin["spill_stores"] is None and from_cubin["spill_loads"] is None
    if probe == "spills":
        assert ptxas["spill_stores"] > 0 and found["stack"] > 0


def _some_gemm_specs():
    from helpers.plan import gc as configs
    specs = configs.all_specs(everything=True)
    return specs[:: max(1, len(specs) // 6)][:6]


@pytest.mark.parametrize("spec", _some_gemm_specs(), ids=lambda s: s.label)
def test_the_cubin_agrees_with_ptxas_on_gemm_kernels(spec):
    r = compiler.compile_spec(spec)
    assert r.resources["source"] == "ptxas"
    from_cubin = compiler.resource_usage_of(r.cubin, "", spec.name)
    assert {k: from_cubin[k] for k in compiler.USAGE_KEYS} == {k: r.resources[k] for k in compiler.USAGE_KEYS}


def test_not_a_cubin_is_an_empty_answer():
    assert compiler.resource_usage_of(b"not an ELF file", "", "gemm_kernel") == {}
    data, _ = _nvrtc(*PROBES["tiny"][:2])
    with pytest.raises(cubin.CubinError, match="no symbol"):
        cubin.kernel_resources(data, "other")
    with pytest.raises(cubin.CubinError):
        cubin.kernel_resources(data[:200], "tiny")


def test_the_log_parser_reads_the_named_kernel():
    src, _, _ = PROBES["second kernel"]
    _, log = _nvrtc(src, "two")
    one, two = compiler.resource_usage(log, "one"), compiler.resource_usage(log, "two")
    assert two["static_smem"] == 132 and "static_smem" not in one
    assert compiler.resource_usage(log, "three") == {}
