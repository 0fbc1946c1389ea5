"The pages speak about RL and the library only: no tracker issue numbers, work periods or remarks on how they were produced."
import json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the project's own check for such remarks; "session of", "helper function" are ordinary English and pass
WORDS = re.compile(r"\bissue \d+|\bthis session\b|\bsessions?\b(?! of)|\bhelpers?\b(?! function)|\blent\b|\bthis task\b",
                   re.IGNORECASE)

def _texts(path:Path):
    "(where, text) pairs of a page: each cell's source and outputs for a notebook, the whole file otherwise."
    if path.suffix != ".ipynb":
        yield "", path.read_text(encoding="utf-8"); return
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        yield f"cell {i} source", "".join(cell.get("source", ""))
        for o in cell.get("outputs", []):
            text = o.get("text") or o.get("data", {}).get("text/plain") or o.get("data", {}).get("text/markdown") or ""
            yield f"cell {i} output", "".join(text)

def pages():
    return sorted(ROOT.glob("nbs/*.ipynb")) + [ROOT / "README.md"] + sorted(ROOT.glob("docs/*.md"))

def find_words(paths) -> list[str]:
    "One line per hit: file, cell (for notebooks), the match and a little context."
    hits = []
    for p in paths:
        if not p.exists(): continue
        for where, text in _texts(p):
            for m in WORDS.finditer(text):
                ctx = text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ")
                hits.append(f"{p.relative_to(ROOT)} {where}: {m.group(0)!r} in ...{ctx}...")
    return hits

def test_regex_catches_and_passes():
    for bad in ["see issue 14", "made in this session", "two sessions", "a helper", "helpers", "lent GPU", "In this task"]:
        assert WORDS.search(bad), bad
    for ok in ["a session of training", "a helper function", "the task", "issue", "silent", "Valentine"]:
        assert not WORDS.search(ok), ok

def test_pages_have_no_project_words():
    hits = find_words(pages())
    assert not hits, f"{len(hits)} remarks about how the pages were produced:\n" + "\n".join(hits)
