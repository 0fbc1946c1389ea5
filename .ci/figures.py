#!/usr/bin/env python3
"""List the committed notebook cells that draw a figure but hold no image (the docs site renders committed outputs).

A cell draws when it calls matplotlib at top level (outside any def or class body): `plt.show/subplots/figure/...`, or
`.plot/.imshow/.bar/.hist/.scatter/...` on an axis; or when it calls a function the notebook defines that does. `#| gpu` cells are exempt. Exit status 1 when some cell lacks its
image. Execute a notebook with `python .ci/execute_nb.py nbs/X.ipynb [--flags slow]` to store its figures.
`tests/test_figures.py` runs the same check in `make test`.
"""
import ast, json, re, sys
from pathlib import Path

NBS = Path(__file__).resolve().parents[1] / "nbs"
PLT = {"show", "subplots", "figure", "plot", "imshow", "bar", "barh", "hist", "scatter", "errorbar", "fill_between", "subplot_mosaic"}
AXES = {"plot", "imshow", "bar", "barh", "hist", "scatter", "errorbar", "fill_between", "semilogy", "loglog"}


def plotters(srcs:list) -> set:
    "Names of the functions the notebook defines whose body calls matplotlib (a cell calling one of them draws)."
    names = set()
    for src in srcs:
        try: tree = ast.parse("\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!"))))
        except SyntaxError: continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(draws(ast.unparse(b)) for b in node.body): names.add(node.name)
    return names


def draws(src:str, helpers:set=frozenset()) -> bool:
    "Does the cell call matplotlib, or a function of `helpers`, at top level (outside any def / class body)?"
    code = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!")))
    try: tree = ast.parse(code)
    except SyntaxError: return bool(re.search(r"plt\.(show|subplots|figure)\(", src))
    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)): continue
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id in helpers: return True
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                f = child.func
                if isinstance(f.value, ast.Name) and f.value.id == "plt" and f.attr in PLT: return True
                if f.attr in AXES and not (isinstance(f.value, ast.Name) and f.value.id in ("np", "torch", "math")): return True
            if visit(child): return True
        return False
    return visit(tree)


def missing() -> tuple[list[str], int]:
    "(cells that draw but hold no image, number of drawing cells)."
    out, n = [], 0
    for f in sorted(NBS.glob("*.ipynb")):
        cells = json.loads(f.read_text(encoding="utf-8"))["cells"]
        helpers = plotters(["".join(c["source"]) for c in cells if c["cell_type"] == "code"])
        for i, c in enumerate(cells):
            src = "".join(c["source"])
            if c["cell_type"] != "code" or re.search(r"^#\|\s*gpu\b", src, re.M) or not draws(src, helpers): continue
            n += 1
            if not any(k in o.get("data", {}) for o in c.get("outputs", []) for k in ("image/png", "image/svg+xml")):
                out.append(f"{f.name} cell {i}" + (" (slow)" if re.search(r"^#\|\s*slow\b", src, re.M) else ""))
    return out, n


if __name__ == "__main__":
    assert draws("fig, ax = plt.subplots()\nax.plot([1, 2])") and not draws("def f(ax):\n    ax.plot([1])\n    plt.show()")
    miss, n = missing()
    print(f"{n - len(miss)} of {n} drawing cells hold an image" + (":" if miss else ""))
    for m in miss: print(f"  missing: {m}")
    sys.exit(1 if miss else 0)
