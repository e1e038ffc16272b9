"""CPU: bench/survey.py's shape sets and summary (the GPU part is the bench's main suite)."""
import math

import pytest

import helpers

survey = helpers.bench_script("survey")


def test_llm_set():
    shapes = survey.llm_shapes()
    assert len(shapes) == len(survey.LLM_NK) * len(survey.LLM_M) == 44
    assert (4096, 28672, 4096) in shapes and (1024, 3584, 18944) in shapes


def test_random_set_is_seeded_and_tma_legal():
    a, b = survey.random_shapes(24, 28), survey.random_shapes(24, 28)
    assert a == b and a != survey.random_shapes(24, 29)
    assert all(384 <= x <= 12288 and x % 8 == 0 for s in a for x in s)


def test_sets_deduplicate_and_reject_unknown():
    shapes = survey.shapes_for(["llm", "llm", "random"], 5, 1)
    assert len(shapes) == len(set(shapes)) == 44 + 5
    with pytest.raises(ValueError, match="unknown set 'big'"):
        survey.shapes_for(["big"], 5, 1)


def test_summary():
    rows = [{"shape": f"{i}x1x1", "ratio": r, "rawcoop_tflops": 100 * r, "baseline_tflops": 100.0, "plan": "p"}
            for i, r in enumerate([0.5, 0.96, 1.0, 1.2, 2.0])]
    s = survey.summarize(rows, worst=2)
    assert s["count"] == 5 and s["min"] == 0.5 and s["max"] == 2.0 and s["median"] == 1.0
    assert math.isclose(s["geomean"], math.exp(sum(math.log(r["ratio"]) for r in rows) / 5))
    assert s["under_0.97"] == 2 and s["under_1.0"] == 2
    assert [w["shape"] for w in s["worst"]] == ["0x1x1", "1x1x1"]
    text = survey.format_summary(s)
    assert "5 shapes: geomean" in text and "2 under 0.97" in text and "0x1x1 0.500" in text
    assert survey.summarize([], 3) == {"count": 0} and survey.format_summary({"count": 0}) == "no rows"


def test_list_needs_no_gpu(capsys):
    assert survey.main(["--list", "--set", "llm"]) == 0
    out = capsys.readouterr().out.strip().split(",")
    assert len(out) == 44 and out[0] == "1024x6144x4096"
    assert survey.main(["--list", "--set", "nope"]) == 2


def test_pitch_classes():
    """16-bit TN: a/b rows are 2K bytes apart, D's 2N; K or N = 8 mod 16 is an odd multiple of 16 bytes."""
    assert survey.pitch_class("2336x2536x1816") == "operand"     # K = 1816 = 8 mod 16 (N too: operand first)
    assert survey.pitch_class("600x8808x2224") == "d"            # N = 8808 = 8 mod 16, K aligned
    assert survey.pitch_class("4096x4096x4096") == "aligned"
    from helpers.plan import gc as gc
    for k in (1816, 2224, 1400, 1408, 8, 16):
        assert (survey.pitch_class(f"128x128x{k}") == "operand") == (2 * k % 32 == 16)


def _row(shape, ratio, ours_us=100.0, host_us=20.0, plan="p"):
    return {"shape": shape, "ratio": ratio, "rawcoop_ms": ours_us / 1e3, "baseline_ms": ratio * ours_us / 1e3,
            "rawcoop_host_us": host_us, "baseline_host_us": host_us, "rawcoop_tflops": 1.0,
            "baseline_tflops": 1.0, "plan": plan}


def test_gpu_bound_rows_and_classes():
    rows = [_row("4096x4096x4096", 1.0), _row("1000x1000x1000", 2.0, ours_us=15.0, host_us=14.0),
            _row("2000x2000x1816", 0.8), _row("2000x2008x2048", 0.9)]
    assert [survey.gpu_bound(r) for r in rows] == [True, False, True, True]
    assert survey.gpu_bound({"rawcoop_ms": 0.001, "baseline_ms": 0.001})          # no host times: GPU-bound
    s = survey.summarize(rows, 1)
    assert s["count"] == 4 and s["gpu_bound"]["count"] == 3
    assert math.isclose(s["gpu_bound"]["geomean"], (1.0 * 0.8 * 0.9) ** (1 / 3))
    assert s["pitch_classes"] == {"aligned": {"count": 1, "geomean": 1.0, "under_0.97": 0},
                                  "operand": {"count": 1, "geomean": 0.8, "under_0.97": 1},
                                  "d": {"count": 1, "geomean": 0.9, "under_0.97": 1}}
    text = survey.format_summary(s)
    assert "GPU-bound rows (both sides >= 1.25x their host time): 3, geomean 0.896" in text
    assert "GPU-bound, a/b pitch misaligned (K = 8 mod 16): 1 shapes, geomean 0.800, 1 under 0.97" in text


def test_compare_measures_drift_on_unchanged_gpu_bound_plans(tmp_path, capsys):
    old = {"rows": [_row("1x1x1", 1.0), _row("2x2x2", 1.0), _row("3x3x3", 0.8, plan="a grid=1 D"),
                    _row("4x4x4", 1.0, ours_us=15.0, host_us=14.0)]}
    new = {"rows": [_row("1x1x1", 1.1), _row("2x2x2", 1.1), _row("3x3x3", 1.1, plan="b grid=2 D"),
                    _row("4x4x4", 2.0, ours_us=15.0, host_us=14.0), _row("5x5x5", 1.0)]}
    c = survey.compare(old, new)
    assert c["shared"] == 4 and c["same_plan"] == 3 and c["steady"] == 2       # 4x4x4 is host-bound
    assert math.isclose(c["drift"], 1.1)
    (x,) = c["changed"]
    assert x["shape"] == "3x3x3" and x["old_plan"] == "a" and x["new_plan"] == "b"
    assert math.isclose(x["change"], 1.375) and math.isclose(x["change_vs_drift"], 1.25) and x["gpu_bound"]
    text = survey.format_compare(c)
    assert "3 with the same plan, 2 of those GPU-bound in both runs: their ratio moved 1.100x" in text
    assert "3x3x3 0.800 -> 1.100  (1.250 against the drift)  a -> b" in text
    with pytest.raises(ValueError, match="no shape in common"):
        survey.compare(old, {"rows": [_row("9x9x9", 1.0)]})
    import json
    (tmp_path / "o.json").write_text(json.dumps(old))
    (tmp_path / "n.json").write_text(json.dumps(new))
    assert survey.main(["--compare", str(tmp_path / "o.json"), str(tmp_path / "n.json")]) == 0
    assert "1 changed plan" in capsys.readouterr().out
    assert survey.main(["--compare", str(tmp_path / "o.json"), str(tmp_path / "missing.json")]) == 2
