"""CPU: crash-isolated warm-up and the command line."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(args, env_extra=None, timeout=300):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "rawcoop", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_warmup_cold_then_all_hits(tmp_path):
    env = {"RAWCOOP_CACHE_DIR": str(tmp_path / "c")}
    r1 = _run(["warmup", "--quiet", "--json", str(tmp_path / "r1.json")], env)
    assert r1.returncode == 0, r1.stderr
    j1 = json.loads((tmp_path / "r1.json").read_text())
    from rawcoop import registry
    assert j1["total"] == len(registry.all_specs())
    assert j1["compiled"] == j1["total"] and j1["failed"] == 0 and j1["hits"] == 0
    r2 = _run(["warmup", "--quiet", "--json", str(tmp_path / "r2.json")], env)
    assert r2.returncode == 0
    j2 = json.loads((tmp_path / "r2.json").read_text())
    assert j2["hits"] == j2["total"] and j2["compiled"] == 0
    assert f"{j2['total']} cache hits" in r2.stdout


def test_warmup_survives_a_crashing_compile(tmp_path):
    env = {"RAWCOOP_CACHE_DIR": str(tmp_path / "c"),
           "RAWCOOP_WARMUP_FAULT": "CLUSTER=2,ELEM_BYTES=2=segv"}
    r = _run(["warmup", "--quiet", "--jobs", "2", "--kernel", "tile_replicate",
              "--json", str(tmp_path / "r.json")], env)
    assert r.returncode == 1
    rep = json.loads((tmp_path / "r.json").read_text())
    failed = [k for k in rep["kernels"] if k["status"] == "failed"]
    assert len(failed) == 1 and "CLUSTER=2,ELEM_BYTES=2" in failed[0]["kernel"]
    assert "SIGSEGV" in failed[0]["error"]
    assert rep["compiled"] == rep["total"] - 1          # the rest went on
    assert "FAILED tile_replicate[CLUSTER=2,ELEM_BYTES=2" in r.stderr


def test_warmup_times_out_a_hanging_compile(tmp_path):
    env = {"RAWCOOP_CACHE_DIR": str(tmp_path / "c"),
           "RAWCOOP_WARMUP_FAULT": "CLUSTER=4,ELEM_BYTES=8=hang"}
    r = _run(["warmup", "--quiet", "--jobs", "1", "--timeout", "3", "--kernel", "ELEM_BYTES=8",
              "--json", str(tmp_path / "r.json")], env, timeout=120)
    assert r.returncode == 1
    rep = json.loads((tmp_path / "r.json").read_text())
    failed = [k for k in rep["kernels"] if k["status"] == "failed"]
    assert [k["kernel"] for k in failed] == [k["kernel"] for k in rep["kernels"] if "CLUSTER=4" in k["kernel"]]
    assert "timed out" in failed[0]["error"]
    assert rep["compiled"] == rep["total"] - 1


def test_info_without_gpu_and_cache_commands(tmp_path):
    env = {"RAWCOOP_CACHE_DIR": str(tmp_path / "c")}
    r = _run(["info"], env)
    assert r.returncode == 0, r.stderr
    for field in ("rawcoop", "cuda-bindings", "nvrtc", "cupy", "driver", "cache dir"):
        assert field in r.stdout
    assert not (tmp_path / "c").exists(), "info must not create the cache directory"
    _run(["warmup", "--quiet", "--kernel", "CLUSTER=1,ELEM_BYTES=2"], env)
    r = _run(["cache", "info"], env)
    assert "entries    1" in r.stdout
    r = _run(["cache", "clear"], env)
    assert "removed 2 files" in r.stdout


def test_no_arguments_without_gpu_runs_warmup(tmp_path):
    from rawcoop import device
    if device.has_hopper():
        pytest.skip("this machine has a GPU: no-argument run is the demo")
    r = _run([], {"RAWCOOP_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr
    assert "warm-up:" in r.stdout


def test_import_does_not_touch_cache_dir(tmp_path):
    d = tmp_path / "never"
    env = dict(os.environ, RAWCOOP_CACHE_DIR=str(d), PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", "import rawcoop, rawcoop.cli, rawcoop.cache"], env=env, check=True)
    assert not d.exists()


def test_wheel_ships_kernel_sources(tmp_path):
    """The wheel maps kernels/ to rawcoop/kernels, and an installed copy finds them there."""
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import zipfile
    whl = next(tmp_path.glob("rawcoop-*.whl"))
    names = zipfile.ZipFile(whl).namelist()
    for src in (p.name for p in (ROOT / "kernels").glob("*.cu*")):
        assert f"rawcoop/kernels/{src}" in names
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    out = subprocess.run([sys.executable, "-c", "import rawcoop.sources as s; print(s.kernels_dir())"],
                         env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True, text=True,
                         cwd=tmp_path, check=True).stdout.strip()
    assert out == str(site / "rawcoop" / "kernels")


def test_sixteen_processes_warm_one_cold_cache(tmp_path):
    """16 warm-ups of the same configurations into one cold directory at once:
    all succeed, every entry verifies, and (with the per-key lock) each key is
    compiled about once in total."""
    import hashlib
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAWCOOP_CACHE_DIR=str(tmp_path / "c"),
               RAWCOOP_LOCK_DIR=str(tmp_path / "locks"))
    procs = [subprocess.Popen([sys.executable, "-m", "rawcoop", "warmup", "--quiet", "--jobs", "1",
                               "--kernel", "tile_replicate", "--json", str(tmp_path / f"r{i}.json")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(16)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    reports = [json.loads((tmp_path / f"r{i}.json").read_text()) for i in range(16)]
    keys = reports[0]["total"]
    assert all(r["failed"] == 0 and r["total"] == keys for r in reports)
    compiled = sum(r["compiled"] for r in reports)
    assert keys <= compiled <= keys + 2, f"{compiled} compiles for {keys} keys"
    metas = list((tmp_path / "c" / "v1").glob("*/*.json"))
    assert len(metas) == keys
    for meta in metas:
        m = json.loads(meta.read_text())
        data = (meta.parent / m["cubin"]).read_bytes()
        assert len(data) == m["size"] and hashlib.sha256(data).hexdigest() == m["sha256"]
    assert not list((tmp_path / "c").rglob("*.tmp"))


# ------------------------------------------------- kernel lists: cache export -> warmup --from
def test_cache_export_then_warmup_from_the_list(tmp_path):
    """What one machine's cache holds (e.g. after running the application or
    the GPU tests) is exported as a kernel list and compiled ahead of time
    elsewhere from it: the same configurations, nothing else."""
    src = {"RAWCOOP_CACHE_DIR": str(tmp_path / "src")}
    r = _run(["warmup", "--quiet", "--kernel", "tile_replicate[CLUSTER=2,"], src)
    assert r.returncode == 0, r.stderr
    listed = tmp_path / "kernels.json"
    r = _run(["cache", "export", str(listed)], src)
    assert r.returncode == 0 and "wrote 4 kernel configurations" in r.stdout, (r.stdout, r.stderr)
    doc = json.loads(listed.read_text())
    assert doc["format"] == "rawcoop-kernels/1" and len(doc["kernels"]) == 4
    assert all(k["source"] == "tile_copy.cu" and k["name"] == "tile_replicate" and k["defines"]["CLUSTER"] == 2
               for k in doc["kernels"])
    assert sorted(k["defines"]["ELEM_BYTES"] for k in doc["kernels"]) == [1, 2, 4, 8]

    dst = {"RAWCOOP_CACHE_DIR": str(tmp_path / "dst")}
    r = _run(["warmup", "--quiet", "--from", str(listed), "--json", str(tmp_path / "w.json")], dst)
    assert r.returncode == 0, r.stderr
    w = json.loads((tmp_path / "w.json").read_text())
    assert w["total"] == 4 and w["compiled"] == 4 and w["failed"] == 0
    from rawcoop.warmup import load_kernel_list
    assert sorted(k["kernel"] for k in w["kernels"]) == sorted(s.label for s in load_kernel_list(str(listed)))
    r = _run(["warmup", "--quiet", "--from", str(listed), "--kernel", "ELEM_BYTES=2,"], dst)
    assert r.returncode == 0 and "1 kernels, 1 cache hits" in r.stdout, r.stdout
    # the destination's own export lists the same configurations
    again = tmp_path / "again.json"
    assert _run(["cache", "export", str(again)], dst).returncode == 0
    assert load_kernel_list(str(again)) == load_kernel_list(str(listed))


def test_cache_specs_skips_entries_without_source(tmp_path, monkeypatch):
    """Entries written before the cache recorded source and defines are
    counted, not guessed; duplicates (other NVRTC versions) listed once."""
    monkeypatch.setenv("RAWCOOP_CACHE_DIR", str(tmp_path / "c"))
    from rawcoop import tile_copy
    from rawcoop.cache import KernelCache
    cache = KernelCache()
    spec = tile_copy.spec(2, 2)
    cache.get(spec)
    entry_dir = next(cache.root.glob("*/"))
    meta = json.loads(next(entry_dir.glob("*.json")).read_text())
    assert meta["source"] == spec.source and meta["defines"] == [list(d) for d in spec.defines]
    (entry_dir / "old.json").write_text(json.dumps(dict(meta, key="old", source=None)))
    (entry_dir / "dup.json").write_text(json.dumps(dict(meta, key="dup", nvrtc=[11, 0])))
    specs, unknown = cache.specs()
    assert specs == [spec] and unknown == 1


@pytest.mark.parametrize("content, needle", [
    (None, "cannot read it"),
    ("{not json", "not JSON"),
    ('{"format": "other", "kernels": []}', "rawcoop-kernels/1"),
    ('{"format": "rawcoop-kernels/1", "kernels": [{"source": "tile_copy.cu", "name": "tile_replicate", '
     '"defines": {"CLUSTER": true}}]}', "entry 0 needs a source, a name and integer defines"),
    ('{"format": "rawcoop-kernels/1", "kernels": [{"source": "tile_copy.cu", "name": "tile_replicate", '
     '"defines": {"CLUSTER": "2"}}]}', "integer defines"),
    ('{"format": "rawcoop-kernels/1", "kernels": [{"name": "x", "defines": {}}]}', "needs a source"),
    ('{"format": "rawcoop-kernels/1", "kernels": [{"source": "nope.cu", "name": "x", "defines": {}}]}',
     "no kernel source 'nope.cu'"),
    ('{"format": "rawcoop-kernels/1", "kernels": [{"source": "../rawcoop/cli.py", "name": "x", "defines": {}}]}',
     "no kernel source '../rawcoop/cli.py'"),
])
def test_warmup_from_a_bad_list_names_the_problem(tmp_path, content, needle):
    from rawcoop.warmup import load_kernel_list
    path = tmp_path / "list.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match="kernel list .*list.json") as e:
        load_kernel_list(str(path))
    assert needle in str(e.value)


def test_warmup_from_command_line_errors(tmp_path):
    env = {"RAWCOOP_CACHE_DIR": str(tmp_path / "c")}
    path = tmp_path / "list.json"
    path.write_text('{"format": "rawcoop-kernels/1", "kernels": []}')
    r = _run(["warmup", "--from", str(path), "--all"], env)
    assert r.returncode != 0 and "does not combine with --all" in r.stderr and "Traceback" not in r.stderr
    r = _run(["warmup", "--from", str(tmp_path / "missing.json")], env)
    assert r.returncode != 0 and "--from: kernel list" in r.stderr and "cannot read it" in r.stderr
    r = _run(["cache", "export"], env)
    assert r.returncode != 0 and "name the file to write" in r.stderr
    r = _run(["cache", "info", str(path)], env)
    assert r.returncode != 0 and "takes no file" in r.stderr
    assert not (tmp_path / "c").exists()


def test_committed_gpu_kernel_list_matches_the_kernels():
    """tests/gpu/kernels.json (the GPU suite's kernels, exported on the H200 and compiled up front by
    ``warmup --from``) loads, names only kernels that exist, and every define it sets is one its
    source or kernels/*.cuh declares (``#ifndef NAME``): a renamed define would make the list compile
    other kernels than the tests run, silently - re-export it then (`python -m rawcoop cache export`)."""
    import re

    from rawcoop.warmup import load_kernel_list
    specs = load_kernel_list(str(ROOT / "tests" / "gpu" / "kernels.json"))
    assert len(specs) >= 500
    headers = "".join(h.read_text() for h in (ROOT / "kernels").glob("*.cuh"))
    declared = {}
    for spec in specs:
        if spec.source not in declared:
            text = (ROOT / "kernels" / spec.source).read_text()
            assert re.search(rf"__global__[\s\S]{{0,200}}?\b{spec.name}\s*\(", text), (spec.source, spec.name)
            declared[spec.source] = set(re.findall(r"#ifndef\s+([A-Z_][A-Z0-9_]*)", text + headers))
        unknown = set(dict(spec.defines)) - declared[spec.source]
        assert not unknown, (spec.label, unknown)
