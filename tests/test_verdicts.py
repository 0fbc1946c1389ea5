"""Every surface shows every verdict: the claims page's and 50_failure_modes' verdict tables hold one row per VERDICT line
that the notebooks print, README's headline table one row per record across starts, with the same state and history, and every VERDICT id has a declared history (`rl_notes.analysis.VERDICT_META`)."""
import json
from pathlib import Path

from rl_notes.analysis import HISTORY, VERDICT_META, verdict_meta, verdict_rows, parse_verdict, verdict_lines

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
HEAD = "| claim | state | history |"


def table_rows(text:str) -> list[list[str]]:
    "The rows of the verdict table in a markdown text (after its header and separator, up to the first line that is not a row), as cells."
    lines = text.splitlines()
    i = next((i for i, l in enumerate(lines) if l.startswith(HEAD)), None)
    assert i is not None, "no verdict table (its header) in the text"
    rows = []
    for l in lines[i + 2:]:
        if not l.startswith("| "): break
        rows.append([c.strip() for c in l.strip("| ").split(" | ")])
    return rows


def _markdown_outputs(nb:str) -> str:
    cells = json.loads((NBS / nb).read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(o.get("data", {}).get("text/markdown", "")) for c in cells for o in c.get("outputs", []))


def test_every_verdict_id_is_declared():
    lines = [l for f in sorted(NBS.glob("*.ipynb")) for l in verdict_lines(f)]
    assert lines, "no VERDICT lines in the notebooks' outputs"
    missing = sorted({parse_verdict(l).id for l in lines if verdict_meta(parse_verdict(l).id) is None})
    assert not missing, f"VERDICT ids with no declared history in rl_notes.analysis.VERDICT_META: {missing}"
    for k, m in VERDICT_META.items():
        assert all(HISTORY.fullmatch(t) for t in m.history.split("; ")), f"{k}: history {m.history!r} is not made of the declared tags"


def test_surfaces_hold_the_same_verdict_rows():
    rows = verdict_rows(NBS)
    claims = table_rows(_markdown_outputs("claims.ipynb"))
    summary = table_rows(_markdown_outputs("50_failure_modes.ipynb"))
    assert len(claims) == len(summary) == len(rows), \
        f"verdict rows: claims page {len(claims)}, 50_failure_modes {len(summary)}, VERDICT lines {len(rows)}"
    # the same claim, state, history, effect, interval, p and conditions on every surface (the notebook column links differently)
    assert [r[:-1] for r in claims] == [r[:-1] for r in summary]
    for r, cells in zip(rows, claims):
        assert cells[0] == r.v.id and cells[1].startswith(f"**{r.state}**") and cells[2].startswith(r.meta.history)


def test_readme_headline_holds_every_record_across_starts():
    "README's headline table: one row per record measured across starts, the same rows the claims page shows."
    from rl_notes.analysis import verdict_records
    head = "| claim | verdict | effect (± s.e.) |"
    def block(text):
        lines = text.splitlines(); i = next(i for i, l in enumerate(lines) if l.startswith(head)); out = []
        for l in lines[i + 2:]:
            if not l.startswith("| "): break
            out.append(l.split(" | ")[:-1])
        return out
    recs = [r for r in verdict_records(NBS) if r["n_starts"] > 1]
    readme, claims = block((ROOT / "README.md").read_text(encoding="utf-8")), block(_markdown_outputs("claims.ipynb"))
    assert len(readme) == len(recs) == len(claims) and readme == claims


def test_verdicts_print_only_in_experiment_notebooks():
    "A claim's verdict is an experiment's: only the 5x notebooks print VERDICT lines (the algorithm notebooks show mechanisms and link to them)."
    outside = {f.name: len(ls) for f in sorted(NBS.glob("*.ipynb")) if (ls := verdict_lines(f)) and not f.name.startswith("5")}
    assert not outside, f"VERDICT lines printed outside the 5x experiment notebooks: {outside}"
