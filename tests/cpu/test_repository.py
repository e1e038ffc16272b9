"""The tracked tree speaks of the product only: no account of how the work
was organised (numbered development steps, work sessions, issue numbers,
notebook files) in code, comments, tests, docs or file names."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN = [
    r"\bstops?[ _-]?\d+",
    r"\bsessions?\b",
    r"\bcall \d+\b",
    r"\bcalls \d+ ?[-–,] ?\d+",
    r"\bissues?[ _-]?#?\d+",
    r"next[_ ]session",
    r"NOTES\.md",
]
PATTERN = re.compile("|".join(f"(?:{p})" for p in FORBIDDEN), re.IGNORECASE)
ALLOWED = [re.compile(r"""scope=["']session["']""")]     # pytest's fixture scope keyword
BINARY = {".png", ".cubin", ".whl", ".gz", ".xz", ".tgz"}


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked tree is unknown")
    return [ROOT / p for p in out.decode().split("\0") if p]


def offending_lines(name: str, text: str) -> list[str]:
    """``name:line: text`` of each line (and the file name itself) that names a development step."""
    found = []
    if PATTERN.search(name):
        found.append(f"{name}: file name")
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line
        for allowed in ALLOWED:
            stripped = allowed.sub("", stripped)
        if PATTERN.search(stripped):
            found.append(f"{name}:{i}: {line.strip()[:120]}")
    return found


def test_the_pattern_catches_development_words():
    # The samples are assembled from parts so that this file does not itself hold the words it forbids.
    step, notes = "st" + "op", "NOTES" + ".md"
    for text in [f"measured in {step} 41", f"{step}41_part3/bench.json", "the next sess" + "ion's checks",
                 "ca" + "ll 6 plan", "ca" + "lls 4-5", "(iss" + "ue 6) fp8", f"see bench/{notes}", "this sess" + "ion"]:
        assert offending_lines("x.py", text), text
    for text in ['@pytest.fixture(scope="session")', "a non-stop loop", "calls 20 times", "the tissue",
                 "stops the pipeline", "recall"]:
        assert not offending_lines("x.py", text), text
    assert offending_lines(f"bench/results/{step}41_bench.json", "")


def test_tracked_tree_has_no_development_process_words():
    me = Path(__file__).resolve()
    found = []
    for path in _tracked_files():
        if path.resolve() == me or path.suffix in BINARY or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += offending_lines(str(path.relative_to(ROOT)), text)
    assert not found, f"{len(found)} lines name development steps:\n" + "\n".join(found[:60])
