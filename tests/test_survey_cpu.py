"""CPU: bench/survey.py's shape sets and summary (the GPU part is the bench's main suite)."""
import math

import pytest

import gpu_helpers

survey = gpu_helpers.bench_script("survey")


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
