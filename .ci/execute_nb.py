"""Execute notebooks in place and keep their outputs (images included), as the docs site renders them.

    python .ci/execute_nb.py nbs/12_dapo.ipynb [more.ipynb ...] [--flags slow [--cells 58,60]]

Cells flagged `#| slow` / `#| gpu` / `#| notest` are skipped unless their flag is passed with --flags; a skipped
cell keeps the outputs it has. The kernel is execnb's CaptureShell with matplotlib's inline backend (PNG), the
same shell `nbdev_test` uses, so a figure a cell draws is stored as image/png. Stops at the first error (the
notebook is not written then) and prints, per notebook, the cells run, the seconds, and the images written.
"""
import argparse, os, re, time
from pathlib import Path

os.environ.pop("MPLBACKEND", None)  # a non-inline backend would draw nothing into the outputs
from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell

FLAG = re.compile(r"^#\|\s*(slow|gpu|notest)\b", re.M)


def run(path:Path, flags:set, cells:set|None=None) -> None:
    path = path.resolve()
    nb = read_nb(path)
    os.chdir(path.parent)  # as nbdev_test runs a notebook: in its own folder
    shell = CaptureShell(path=path.parent, mpl_format="png")
    t0, ran, imgs = time.time(), 0, 0
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code": continue
        fl = set(FLAG.findall(c.source))
        if fl - flags: continue
        if fl and cells is not None and i not in cells: continue  # a flagged cell not asked for keeps its outputs
        c.outputs = []  # execnb keeps a cell's old outputs when the new run prints nothing
        shell.cell(c)
        ran += 1
        if shell.exc:
            raise SystemExit(f"{path} cell {i} raised: {shell.exc!r}\n{c.source[:300]}")
        imgs += sum("image/png" in o.get("data", {}) for o in c.get("outputs", []))
    write_nb(nb, path)
    print(f"{path}: {ran} cells, {time.time() - t0:.0f} s, {imgs} images")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nbs", nargs="+", type=Path)
    ap.add_argument("--flags", default="", help="comma-separated flags whose cells also run (slow,gpu)")
    ap.add_argument("--cells", default=None, help="comma-separated indices: of the flagged cells, run only these")
    a = ap.parse_args()
    for p in [q.resolve() for q in a.nbs]: run(p, {f for f in a.flags.split(",") if f}, {int(x) for x in a.cells.split(",")} if a.cells else None)
