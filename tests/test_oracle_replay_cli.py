"""bench/oracle_replay.py (no GPU): a rule change replayed on oracle rows picks the timed plan the rule
would run, by label and decomposition, and says which rows' plans were never timed."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def _run(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def _variant(label, decomposition, vs_auto):
    return {"label": label, "cfg": label, "decomposition": decomposition, "vs_auto": vs_auto}


def _rows(cases, rule, speed_b):
    """Oracle rows for ``cases``: the plan under the rule's A value (vs_auto 1.0) and, where the rule moves
    it, the plan under its B value (vs_auto ``speed_b``)."""
    import rule_ab
    import rule_cases
    mod, name, value_a, value_b = rule_ab.parse_rule(rule)
    rows = []
    for case in cases:
        kind, layout, m, n, k = rule_ab.parse_case(case)
        old = getattr(mod, name)
        try:
            setattr(mod, name, value_a)
            a = rule_cases.plan_key(kind, layout, m, n, k)
            setattr(mod, name, value_b)
            b = rule_cases.plan_key(kind, layout, m, n, k)
        finally:
            setattr(mod, name, old)
        variants = [_variant(*a, 1.0)] + ([_variant(*b, speed_b)] if b != a else [])
        rows.append({"case": case, "auto": variants[0], "variants": variants})
    return rows


def test_replay_picks_the_rules_timed_plan(tmp_path, monkeypatch):
    import oracle_replay
    from rawcoop import gemm_configs as gc
    monkeypatch.setattr(gc, "MISALIGNED_NARROW_RATIO", 0.0)      # the 128x256 pairs, as the rows below say
    # misaligned pitches (K = 8 mod 16, TN): a small problem (6 x 5 tiles of 128x256) leaves the 2x1 pairs
    # at MISALIGNED_PITCH_MIN_FILL 0.5, a large one (40 x 16 tiles) keeps them
    cases = ["bf16:TN:768x1280x1032", "bf16:TN:5120x4096x1032"]
    rows = _rows(cases, "gemm_configs.MISALIGNED_PITCH_MIN_FILL=0.0/0.5", 1.25)
    assert len(rows[0]["variants"]) == 2 and len(rows[1]["variants"]) == 1
    assert rows[0]["auto"]["cfg"] == "128x256 cl2" and rows[0]["variants"][1]["cfg"] != "128x256 cl2"
    setting_a = oracle_replay.parse_setting("gemm_configs.MISALIGNED_PITCH_MIN_FILL=0.0")
    setting_b = oracle_replay.parse_setting("gemm_configs.MISALIGNED_PITCH_MIN_FILL=0.5")
    before = gc.MISALIGNED_PITCH_MIN_FILL
    got = oracle_replay.replay(rows, [setting_b])
    assert gc.MISALIGNED_PITCH_MIN_FILL == before                    # the constant restored
    assert [g[3] for g in got] == [1.25, 1.0]
    assert [g[3] for g in oracle_replay.replay(rows, [setting_a])] == [1.0, 1.0]
    path = tmp_path / "oracle.json"
    path.write_text(json.dumps({"rows": rows}))
    pairs_256 = "gemm_configs.MISALIGNED_NARROW_RATIO=0.0"
    args = ("bench/oracle_replay.py", str(path), "--base", "gemm_configs.MISALIGNED_PITCH_MIN_FILL=0.0",
            "--base", pairs_256, "--rule", "gemm_configs.MISALIGNED_PITCH_MIN_FILL=0.5", "--rule", pairs_256)
    r = _run(*args)
    assert r.returncode == 0, r.stderr
    assert "768x1280x1032" in r.stdout and "5120x4096x1032" not in r.stdout    # only the moved row printed
    assert "1 moved, 1 of them faster" in r.stdout and "1.0000 (base) -> 1.1180 (rules)" in r.stdout
    rows[0]["variants"].pop()                                         # the rule's plan was never timed
    path.write_text(json.dumps({"rows": rows}))
    r = _run(*args)
    assert r.returncode == 0 and "not timed: bf16:TN:768x1280x1032" in r.stdout


def test_replay_refuses_bad_arguments(tmp_path):
    r = _run("bench/oracle_replay.py", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "oracle_replay.py:" in r.stderr
    (tmp_path / "o.json").write_text(json.dumps({"rows": []}))
    (tmp_path / "bench.json").write_text(json.dumps([{"case": "x"}]))          # a bench JSON: no rows
    r = _run("bench/oracle_replay.py", str(tmp_path / "bench.json"))
    assert r.returncode == 2 and "not a bench/oracle.py or bench/rule_ab.py JSON" in r.stderr
    for bad in ("gemm_configs.MISALIGNED_PITCH_MIN_FILL=0.1/0.5", "gemm_configs.NO_SUCH=1", "nothing"):
        r = _run("bench/oracle_replay.py", str(tmp_path / "o.json"), "--rule", bad)
        assert r.returncode == 2 and "oracle_replay.py:" in r.stderr, bad


def test_replay_reads_rule_ab_rows(tmp_path):
    """A bench/rule_ab.py JSON replays as two-plan rows: A the automatic plan (1.0), B at its b_vs_a; a row
    whose plans were the same is skipped."""
    import oracle_replay
    import rule_cases
    from rawcoop import gemm_configs as gc
    case = "bf16:NN:2008x416x7040"
    b = rule_cases.plan_key("bf16", "NN", 2008, 416, 7040)            # 128x208 (NARROW_OVER_128)
    old = gc.NARROW_OVER_128_RATIO
    try:
        gc.NARROW_OVER_128_RATIO = 0.0
        a = rule_cases.plan_key("bf16", "NN", 2008, 416, 7040)        # 128x128 split-K
    finally:
        gc.NARROW_OVER_128_RATIO = old
    assert a != b
    doc = {"rows": [{"case": case, "cfg_a": a[0], "dec_a": a[1], "cfg_b": b[0], "dec_b": b[1], "b_vs_a": 1.5},
                    {"case": "bf16:TN:4096x4096x4096", "same_plan": True, "cfg_a": "x", "dec_a": "y",
                     "cfg_b": "x", "dec_b": "y"}]}
    rows = oracle_replay.oracle_rows(doc)
    assert len(rows) == 1 and [v["vs_auto"] for v in rows[0]["variants"]] == [1.0, 1.5]
    setting = oracle_replay.parse_setting("gemm_configs.NARROW_OVER_128_RATIO=0.0")
    assert [g[3] for g in oracle_replay.replay(rows, [])] == [1.5]            # the code as it is: B
    assert [g[3] for g in oracle_replay.replay(rows, [setting])] == [1.0]
    path = tmp_path / "ab.json"
    path.write_text(json.dumps(doc))
    r = _run("bench/oracle_replay.py", str(path), "--base", "gemm_configs.NARROW_OVER_128_RATIO=0.0")
    assert r.returncode == 0, r.stderr
    assert "1 moved, 1 of them faster" in r.stdout and "1.0000 (base) -> 1.5000 (rules)" in r.stdout
