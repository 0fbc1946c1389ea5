"""The claims page (nbs/claims.ipynb) is generated from the notebooks: its committed table must be what its cells
produce from the notebooks as they are now. When a notebook changes, re-run `python .ci/execute_nb.py nbs/claims.ipynb`."""
import json, os
from pathlib import Path

from execnb.nbio import read_nb
from execnb.shell import CaptureShell

NBS = Path(__file__).resolve().parents[1] / "nbs"


def _markdown(cells) -> str:
    return "".join("".join(o.get("data", {}).get("text/markdown", "")) for c in cells for o in c.get("outputs", []))


def test_claims_page_is_current():
    committed = _markdown(json.loads((NBS / "claims.ipynb").read_text(encoding="utf-8"))["cells"])
    assert "| D1 |" in committed and "| G4 |" in committed, "the committed claims page has no table"
    nb, cwd = read_nb(NBS / "claims.ipynb"), os.getcwd()
    try:
        os.chdir(NBS)
        shell = CaptureShell(path=NBS)
        for c in nb.cells:
            if c.cell_type == "code":
                shell.cell(c)
                assert shell.exc is None, f"claims.ipynb raised: {shell.exc!r}"
    finally:
        os.chdir(cwd)
    assert _markdown(nb.cells) == committed, \
        "nbs/claims.ipynb is stale: run `python .ci/execute_nb.py nbs/claims.ipynb` and commit it"
