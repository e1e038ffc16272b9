"""CPU: watchdog mode compiles into the kernels (RAWCOOP_WATCHDOG makes every
barrier wait bounded; tests/gpu/test_watchdog_gpu.py runs a kernel that traps)."""


def test_watchdog_compiles_into_the_kernels(monkeypatch):
    from rawcoop import compiler
    from helpers.plan import gc as configs
    spec = configs.GemmConfig(128, True, True, True).spec
    plain = compiler.compile_spec(spec, want_ptx=True)
    assert "trap;" not in plain.ptx and "vprintf" not in plain.ptx
    monkeypatch.setenv("RAWCOOP_WATCHDOG", "1")
    watched = compiler.compile_spec(spec, want_ptx=True)
    assert "trap;" in watched.ptx and "vprintf" in watched.ptx and "%clock64" in watched.ptx
    assert any(o.startswith("-DRAWCOOP_WATCHDOG=") for o in watched.options)
    from rawcoop.cache import cache_key
    assert cache_key(spec) != cache_key(spec, options=compiler.base_options()[:-1])
