"The dry run of .ci/gpu_cells.py: a `#| gpu` cell must find every name it reads in the unflagged cells before it."
import importlib.util, json, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_cells", ROOT / ".ci" / "gpu_cells.py")
gc = importlib.util.module_from_spec(spec); spec.loader.exec_module(gc)

def _nb(tmp_path, cells):
    p = tmp_path / "x.ipynb"
    p.write_text(json.dumps({"cells": [{"cell_type": "code", "source": s, "metadata": {}, "outputs": []} for s in cells]}))
    return p

def test_dry_names_what_only_a_slow_cell_defines(tmp_path):
    p = _nb(tmp_path, ["import math\nK = 3", "#| slow\nSLOW = 1", "#| gpu\nprint(math.pi, K, SLOW, undefined_x)"])
    (problem,) = gc.dry(p)
    assert "cell 2 (#| gpu) reads ['SLOW', 'undefined_x']" in problem

def test_dry_passes_a_self_contained_cell_and_reports_syntax(tmp_path):
    assert gc.dry(_nb(tmp_path, ["from os import path", "#| gpu\nimport torch\ndef f(a): return a + path.sep\nprint([f(i) for i in 'ab'])"])) == []
    assert "cell 0" in gc.dry(_nb(tmp_path, ["#| gpu\ndef broken(:"]))[0]

def test_the_repository_dry_run_passes():
    assert gc.main(["--dry"]) == 0
    assert set(gc.NEEDS_SLOW) <= {p.stem for p in gc.gpu_notebooks()}      # the exemptions name notebooks that exist
