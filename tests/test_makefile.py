"The Makefile: every target is in .PHONY and has a `## ` description, and `make help` lists them all."
import re, shutil, subprocess
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "Makefile").read_text()
RULE = re.compile(r"^([A-Za-z0-9_-]+):(?!=)(.*)$", re.M)         # `name: prerequisites ## description`; not `NAME := value`


def _phony() -> set:
    (line,) = re.findall(r"^\.PHONY:(.*)$", TEXT, re.M)
    return set(line.split())


def test_phony_is_complete_and_every_target_is_described():
    rules = {m[1]: m[2] for m in RULE.finditer(TEXT)}
    assert set(rules) == _phony(), (sorted(set(rules) - _phony()), sorted(_phony() - set(rules)))
    assert [t for t, rest in rules.items() if "## " not in rest] == []


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_help_lists_every_target():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    listed = {l.split()[0] for l in out.splitlines() if l.strip()}
    assert listed == _phony(), sorted(listed ^ _phony())
    assert subprocess.run(["make", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout == out   # the default goal
