"""No number typed by hand: every measured number that the prose of a notebook quotes (a decimal like 0.534, a ratio like
3.7x, a percentage like 47.8%) is printed by a cell output of that notebook or written in its code (a hyper-parameter),
and every such number in README's text (from nbs/index.ipynb) by an output of some notebook. Formulas ($...$), code
spans, links and version numbers are not measurements and are skipped."""
import json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a decimal, a ratio (62x, 1.5x) or a percentage (47.8%), not part of a word, an identifier or a longer number
NUM = re.compile(r"(?<![\w.\-/])(\d+\.\d+(?:e[-+]?\d+)?|\d+(?=x\b)|\d+(?:\.\d+)?(?=%))(?![\w.]*\d)")
VERSION = re.compile(r"\b(torch|transformers|TRL|Python|python|nbdev|accelerate|execnb|fastcore|peft|datasets|tokenizers|"
                     r"Llama|Qwen|Qwen2|LLaMA|Gymnasium|gymnasium|numpy|CUDA|math-verify|version|versions|v)\s*(?:[<>=!~]=?\s*)?"
                     r"\d+(\.\d+)+(x\b)?((,\s*|\s+and\s+|\s+or\s+)\d+(\.\d+)+)*")
SKIP = [re.compile(r"\$\$.*?\$\$", re.S), re.compile(r"\$[^$\n]*\$"), re.compile(r"`[^`\n]*`"),
        re.compile(r"\b(sec\.|secs\.|section|§|eqs?\.|Fig\.|Figure|Table|Appendix|Algorithm)\s*\d+(\.\d+)*", re.I),
        re.compile(r"\]\([^)]*\)"), re.compile(r"https?://\S+"), re.compile(r"arXiv[: ]?\d{4}\.\d{4,5}(v\d)?", re.I)]
OUTNUM = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")

def _cells(path:Path): return json.loads(path.read_text(encoding="utf-8"))["cells"]

def _out_text(cell) -> str:
    t = []
    for o in cell.get("outputs", []):
        if "text" in o: t.append("".join(o["text"]))
        for k in ("text/plain", "text/markdown", "text/html"):
            if k in o.get("data", {}): t.append("".join(o["data"][k]))
    return "\n".join(t)

def prose_numbers(md:str) -> list[tuple[str, str]]:
    "(number, context) for each measured-looking number in a markdown text, formulas, code, links and versions removed."
    for rx in SKIP + [VERSION]: md = rx.sub(lambda m: " " * len(m.group(0)), md)
    return [(m.group(1), md[max(0, m.start() - 60):m.end() + 20].replace("\n", " ")) for m in NUM.finditer(md)]

def known_numbers(texts) -> set[str]:
    "Every number printed in `texts`, also rounded to 0-4 decimals and as a percentage of a fraction (0.478 -> 47.8)."
    known = set()
    for text in texts:
        for s in OUTNUM.findall(text):
            s = s.replace(",", "").lstrip("+-")
            try: v = float(s)
            except ValueError: continue
            known.add(s)
            for k in range(4): known.add(f"{v:.{k}e}")
            for k in range(5):
                known.add(f"{v:.{k}f}"); known.add(f"{100 * v:.{k}f}")
    return known

def _key(n:str) -> str:
    "A prose number as `known_numbers` writes it: scientific notation normalised (2.4e-07 and 2.4e-7 alike)."
    if "e" not in n: return n
    m = n.split("e")[0]; return f"{float(n):.{len(m.split('.')[1]) if '.' in m else 0}e}"

def unprinted(md_cells:list[str], printed:set[str]) -> list[str]:
    return [f"{n!r} in ...{ctx}..." for md in md_cells for n, ctx in prose_numbers(md) if _key(n) not in printed]

def notebook_report(path:Path) -> list[str]:
    cells = _cells(path)
    printed = known_numbers([_out_text(c) for c in cells] + ["".join(c["source"]) for c in cells if c["cell_type"] == "code"])
    md = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    return [f"{path.name}: {h}" for h in unprinted(md, printed)]

def test_extraction():
    got = [n for n, _ in prose_numbers("accuracy 0.534 -> 0.688, 3.7x faster, 47.8% held-out, $\\varepsilon = 0.28$, `lr=3e-3`, "
                                       "torch 2.13, TRL 1.16, transformers>=5.24, transformers 5.16 and 5.23, [paper](https://arxiv.org/abs/2503.14476), "
                                       "arXiv:2504.05118, step 300, the 2-core machine, 1e-4, Qwen2.5-0.5B, sec. 3.4.3, error 2.4e-7")]
    assert got == ["0.534", "0.688", "3.7", "47.8", "2.4e-7"], got
    printed = known_numbers(["held-out 0.4781 | 3.712x | acc 0.534", "x = 0.68800", "err 2.38e-07"])
    assert unprinted(["0.534 and 0.688, 3.7x, 47.8%, 2.4e-7"], printed) == []
    assert len(unprinted(["0.535 and 2.1x"], printed)) == 2

def test_notebook_prose_numbers_are_printed():
    hits = [h for p in sorted(ROOT.glob("nbs/*.ipynb")) if p.name not in PAGES for h in notebook_report(p)]
    assert not hits, f"{len(hits)} numbers in the notebooks' prose that no cell output or code of the notebook prints:\n" + "\n".join(hits)

PAGES = ("index.ipynb", "house.ipynb")   # pages of prose about the whole project: their numbers are checked against every notebook


def test_readme_numbers_are_printed():
    "README's prose (index.ipynb) and the house page quote only numbers that some notebook prints."
    texts = []
    for p in sorted(ROOT.glob("nbs/*.ipynb")):
        for c in _cells(p):
            texts.append(_out_text(c))
            if c["cell_type"] == "code": texts.append("".join(c["source"]))
    printed = known_numbers(texts)
    md = ["".join(c["source"]) for page in PAGES for c in _cells(ROOT / "nbs" / page) if c["cell_type"] == "markdown"]
    hits = unprinted(md, printed)
    assert not hits, f"{len(hits)} numbers in index.ipynb (README) that no notebook prints:\n" + "\n".join(hits)
