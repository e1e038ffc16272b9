"""bench/rule_cases.py (no GPU): the random shapes whose plan a rule change moves, as rule_ab cases; and
bench/oracle.py's argument checks (before any GPU use)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def _run(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_changed_cases_are_exactly_the_moved_plans(monkeypatch):
    import rule_ab
    import rule_cases
    rules = [rule_ab.parse_rule("gemm_configs.WIDTH_192_RATIO=0.0/1.0")]
    from rawcoop import gemm_configs as gc
    monkeypatch.setattr(gc, "NARROW_WIDTH_RATIO", 0.0)   # (stop 33's narrow widths would move some 128x192 on)
    before = gc.WIDTH_192_RATIO
    ch = rule_cases.changed_cases(rules, ["bf16", "fp16"], ["TN", "NT"], 400, 5, 256, 16384)
    assert gc.WIDTH_192_RATIO == before                     # the constant restored
    assert ch and all(a != b for _, a, b in ch)
    assert all("128x192" in b[0] for _, _, b in ch)         # the rule only ever moves plans to 128x192
    for case, a, _ in ch:
        kind, layout, shape = case.split(":")
        m, n, k = map(int, shape.split("x"))
        assert m % 64 == 0 and n % 64 == 0 and k % 64 == 0
        assert rule_cases.plan_key(kind, layout, m, n, k) != a    # the default (1.0) is B's plan
    odd = rule_cases.changed_cases([rule_ab.parse_rule("gemm_configs.MISALIGNED_TALL_RATIO=0.9/1.0")],
                                   ["bf16"], ["TN"], 2000, 7, 256, 16384, step=8)
    # --step 8 draws misaligned pitches (K = 8 mod 16 for TN), whose 2x1 pairs (128x256, 128x192 where
    # misaligned_width_192_fits, 128xW where misaligned_narrow_width) the rule moves
    pairs = {f"128x{w} cl2" for w in (256, 192, *gc.NARROW_RULE_NS)}
    assert odd and all(int(c.split("x")[-1]) % 16 == 8 and a[0] in pairs for c, a, _ in odd)


def test_cli_prints_cases_and_refuses_bad_arguments():
    r = _run("bench/rule_cases.py", "--rule", "gemm_configs.WIDTH_192_RATIO=0.0/1.0", "--draws", "300", "--pick", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert "draws change plan" in lines[0]
    assert len(lines[-1].split(",")) == 3 and all(c.count(":") == 2 for c in lines[-1].split(","))
    for bad in (["--kinds", "int8"], ["--layouts", "XY"], ["--step", "12"], ["--lo", "32"],
                ["--step", "4"], ["--step", "4", "--kinds", "tf32,bf16"]):     # step 4: tf32 alone
        r = _run("bench/rule_cases.py", "--rule", "gemm_configs.WIDTH_192_RATIO=0.0/1.0", *bad)
        assert r.returncode == 2 and "rule_cases.py:" in r.stderr, bad
    r = _run("bench/rule_cases.py", "--rule", "gemm_configs.NO_SUCH=1/2")
    assert r.returncode == 2 and "NO_SUCH" in r.stderr


def test_oracle_refuses_bad_arguments_before_the_gpu():
    r = _run("bench/oracle.py")
    assert r.returncode == 2 and "need shapes" in r.stderr
    r = _run("bench/oracle.py", "--shapes", "100x100x7")
    assert r.returncode == 2 and "oracle:" in r.stderr
    r = _run("bench/oracle.py", "--shapes", "256x256x256", "--widths", "176,100")
    assert r.returncode == 2 and "--widths" in r.stderr and "[100]" in r.stderr


def test_oracle_width_candidates():
    """--widths adds each width alone, with stream-K and in 2x1 clusters."""
    import sys
    sys.path.insert(0, "bench")
    import oracle
    assert oracle.parse_widths("") == [] and oracle.parse_widths("176, 224") == [176, 224]
    assert [lbl for lbl, _ in oracle.width_candidates([176])] == ["176", "176 sk", "176 2x1"]
    assert oracle.width_candidates([224])[2][1] == dict(_block_n=224, _cluster=(2, 1))


def test_oracle_without_a_gpu_says_so_in_one_line():
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            import pytest
            pytest.skip("a GPU is present: the oracle would run")
    except Exception:       # noqa: BLE001 - no CuPy or no driver: no GPU either
        pass
    r = _run("bench/oracle.py", "--shapes", "256x256x256")
    assert r.returncode == 1 and r.stderr.startswith("oracle: no usable GPU") and "Traceback" not in r.stderr


def test_step_4_draws_misaligned_tf32_pitches():
    """--step 4 (tf32 alone): K = 4 mod 8 makes tf32's K-major rows 16 mod 32 bytes, the misaligned pitch; the
    short-K yield for tf32 (side B adds tf32 to MISALIGNED_SHORT_K_TALL_K_BLOCKS, side A leaves it out: stop
    40's A/B) moves such draws from the rule's pairs."""
    r = _run("bench/rule_cases.py", "--rule",
             "gemm_configs.MISALIGNED_SHORT_K_TALL_K_BLOCKS={0:16,1:16,3:16,4:16}/{0:16,1:16,2:16,3:16,4:16}",
             "--kinds", "tf32", "--layouts", "TN", "--step", "4", "--draws", "4000", "--pick", "4", "--seed", "3")
    assert r.returncode == 0, r.stderr
    cases = r.stdout.strip().splitlines()[-1].split(",")
    assert len(cases) == 4, r.stdout
    for c in cases:
        kind, layout, shape = c.split(":")
        k = int(shape.split("x")[2])
        assert (kind, layout) == ("tf32", "TN") and k % 8 == 4 and k < 16 * 32, c
