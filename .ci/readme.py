#!/usr/bin/env python3
"""Write README.md from nbs/index.ipynb (nbdev's readme_nb) without Quarto, which nbdev_readme needs and these
machines cannot install. Markdown cells are copied; code cells become ```python blocks followed by their text
output; cells starting with `#| hide` are skipped. `--check` exits 1 if README.md would change. The markers `<!-- headline -->` and `<!-- scope -->` become the table of the
verdicts across starts (`rl_notes.analysis.headline_table` of the committed records) and its scope box; the marker `<!-- verdicts -->` becomes a table of
the `VERDICT` lines printed in the outputs of nbs/*.ipynb (`rl_notes.analysis.verdict_table`: three states, history, Holm), and the marker `<!-- results -->` becomes rows (what | result | notebook) of
the `RESULT what | result` lines printed there, so that no number in those tables is typed by hand."""
import json, re, sys, pathlib
root = pathlib.Path(__file__).resolve().parent.parent
nb = json.loads((root / "nbs" / "index.ipynb").read_text(encoding="utf-8"))
out = []
for c in nb["cells"]:
    src = "".join(c["source"]).strip("\n")
    if not src: continue
    first = src.split("\n", 1)[0].replace(" ", "")
    if first.startswith("#|hide") or first.startswith("#|default_exp"): continue
    if c["cell_type"] == "markdown":  # a link to a notebook page ([x](claims.ipynb)) points into nbs/ from the README
        out.append(re.sub(r"\]\((?!https?:)([\w-]+\.ipynb)", r"](nbs/\1", src))
    elif c["cell_type"] == "code":
        lines = [l for l in src.split("\n") if not l.replace(" ", "").startswith("#|")]
        out.append("```python\n" + "\n".join(lines) + "\n```")
        text = ""
        for o in c.get("outputs", []):
            if o.get("output_type") == "stream": text += "".join(o["text"])
            elif "data" in o and "text/plain" in o["data"] and "text/markdown" not in o["data"]: text += "".join(o["data"]["text/plain"]) + "\n"
            elif "data" in o and "text/markdown" in o["data"]: out.append("".join(o["data"]["text/markdown"]))
        if text.strip(): out.append("```\n" + text.rstrip("\n") + "\n```")
# the VERDICT lines that the notebooks print, as a table where index.ipynb has the marker: the three-state verdict recomputed from each
# line's interval with the declared sign, the declared design history, Holm within each family (rl_notes.analysis: stdlib and numpy only)
MARK = "<!-- verdicts -->"
sys.path.insert(0, str(root))
from rl_notes.analysis import verdict_rows, verdict_table, verdict_records, headline_table, SCOPE
rows = verdict_rows(root / "nbs")
table = verdict_table(rows) if rows else "(no VERDICT lines in the notebooks' outputs)"
out = [o.replace(MARK, table) for o in out]
# the verdicts across starts, one row per claim, rendered from the records (nbs/verdicts/*.json), and the scope box beside them
link = lambda nb: f"[{nb}](nbs/{nb}.ipynb)"
out = [o.replace("<!-- headline -->", headline_table(verdict_records(root / "nbs"), link)).replace("<!-- scope -->", SCOPE) for o in out]
# the RESULT lines, as rows of the results table where index.ipynb has the marker (right below the table's header)
RMARK, res = "<!-- results -->", []
for f in sorted((root / "nbs").glob("*.ipynb")):
    for c in json.loads(f.read_text(encoding="utf-8"))["cells"]:
        for o in c.get("outputs", []) if c["cell_type"] == "code" else []:
            for line in "".join(o.get("text", "")).splitlines() if o.get("output_type") == "stream" else []:
                if line.startswith("RESULT ") and " | " in line:
                    what, result = line[len("RESULT "):].split(" | ", 1)
                    res.append(f"| {what} | {result} | `{f.stem}` |")
out = [o.replace(RMARK, "\n".join(res) if res else "| (no RESULT lines in the notebooks' outputs) | | |") for o in out]
readme = "<!-- generated from nbs/index.ipynb by .ci/readme.py: edit the notebook, not this file -->\n\n" + "\n\n".join(out) + "\n"
path = root / "README.md"
if "--check" in sys.argv:
    if not path.exists() or path.read_text(encoding="utf-8") != readme:
        print("README.md is out of date with nbs/index.ipynb: run `python .ci/readme.py`", file=sys.stderr); sys.exit(1)
else:
    path.write_text(readme, encoding="utf-8")
