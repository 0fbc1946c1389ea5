#!/usr/bin/env python3
"""Write README.md from nbs/index.ipynb (nbdev's readme_nb) without Quarto, which nbdev_readme needs and these
machines cannot install. Markdown cells are copied; code cells become ```python blocks followed by their text
output; cells starting with `#| hide` are skipped. `--check` exits 1 if README.md would change. Markers (also filled on
the docs site's index page, `docs/build.py`): `<!-- headline -->` and `<!-- scope -->` become the table of the verdicts
across starts (`rl_notes.analysis.headline_table` of the committed records) and its scope box; `<!-- layers -->` a picture
of the layers drawn from the module table of nbs/house.ipynb (the table `tests/test_layers.py` checks imports against);
`<!-- changes -->` the "Where a change goes" table of nbs/house.ipynb; `<!-- speed -->` the GRPO step's speed against
TRL's at three sizes, read from the RESULT lines of nbs/33_trainer.ipynb's outputs. No number in them is typed by hand."""
import json, re, sys, pathlib
root = pathlib.Path(__file__).resolve().parent.parent


def _md_cells(path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(pathlib.Path(path).read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "markdown"]


def layer_rows(house) -> list[tuple[str, str]]:
    "(layer label, module) of each row of the module table in the house page, in the table's order."
    rows = []
    for md in _md_cells(house):
        for line in md.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 3 and re.fullmatch(r"`rl_notes\.\w+`", cells[2]): rows.append((cells[0], cells[2].strip("`").split(".")[1]))
    return rows


def layers_picture(house) -> str:
    "The layers, top (L4) to bottom (L0), each with its modules in import order: a text picture in a code block."
    groups = {}
    for label, mod in layer_rows(house): groups.setdefault(label, []).append(mod)
    w = max(map(len, groups))
    lines = [f"{label:<{w}}  {' · '.join(mods)}" for label, mods in reversed(list(groups.items()))]
    return "```text\n" + "\n".join(lines) + f"\n{'':<{w}}  (each row imports only from the rows below it and its own earlier modules)\n```"


def changes_table(house) -> str:
    md = next(m for m in _md_cells(house) if m.startswith("## Where a change goes"))
    return md.split("\n", 1)[1].strip()


SPEED_RESULT = "one GRPO step with the speed levers vs TRL's `GRPOTrainer`, "
SPEED_ARM = "default (compact + shared prompt) "


def speed_table(link) -> str:
    "One row per size of the GRPO-step benchmark's RESULT lines (33_trainer): the default step's range over its runs against TRL's."
    rows = []
    for c in json.loads((root / "nbs" / "33_trainer.ipynb").read_text(encoding="utf-8"))["cells"]:
        for o in c.get("outputs", []) if c["cell_type"] == "code" else []:
            for line in "".join(o.get("text", "")).splitlines() if o.get("output_type") == "stream" else []:
                if not line.startswith("RESULT " + SPEED_RESULT): continue
                size, result = line[len("RESULT " + SPEED_RESULT):].split(" | ", 1)
                arm = next(a for a in result.split("; ") if a.startswith(SPEED_ARM))
                rows.append(f"| {size} | {arm[len(SPEED_ARM):]} |")
    if not rows: raise SystemExit(f"no RESULT line '{SPEED_RESULT}...' in nbs/33_trainer.ipynb's outputs")
    return (f"| one GRPO step, the defaults vs TRL's `GRPOTrainer` ({link('33_trainer')}) | faster by (min-max over runs) |\n"
            "|---|---|\n" + "\n".join(rows))


def fill(text:str, link) -> str:
    "`text` with its markers replaced (`link(nb)`: how a notebook name is linked where the text is shown)."
    if "<!-- headline -->" in text or "<!-- scope -->" in text:
        sys.path.insert(0, str(root))
        from rl_notes.analysis import verdict_records, headline_table, SCOPE
        text = text.replace("<!-- headline -->", headline_table(verdict_records(root / "nbs"), link)).replace("<!-- scope -->", SCOPE)
    house = root / "nbs" / "house.ipynb"
    if "<!-- layers -->" in text: text = text.replace("<!-- layers -->", layers_picture(house))
    if "<!-- changes -->" in text: text = text.replace("<!-- changes -->", changes_table(house))
    if "<!-- speed -->" in text: text = text.replace("<!-- speed -->", speed_table(link))
    return text


def readme() -> str:
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
    body = fill("\n\n".join(out), lambda nb: f"[{nb}](nbs/{nb}.ipynb)")
    return "<!-- generated from nbs/index.ipynb by .ci/readme.py: edit the notebook, not this file -->\n\n" + body + "\n"


if __name__ == "__main__":
    text, path = readme(), root / "README.md"
    if "--check" in sys.argv:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            print("README.md is out of date with nbs/index.ipynb: run `python .ci/readme.py`", file=sys.stderr); sys.exit(1)
    else:
        path.write_text(text, encoding="utf-8")
