"""Every committed notebook cell that draws a figure holds its image (the docs site renders the committed outputs).
The detector is `.ci/figures.py` (`make figures` lists the cells); `#| gpu` cells are exempt. A cell that only defines a
plotting function does not draw; a cell that calls one does."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("figures", Path(__file__).resolve().parents[1] / ".ci" / "figures.py")
figures = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(figures)


def test_detector():
    assert figures.draws("fig, ax = plt.subplots()\nax.plot([1, 2])")
    assert figures.draws("plt.show()")
    assert not figures.draws("def f(ax):\n    ax.plot([1])\n    plt.show()")       # a definition draws nothing
    assert not figures.draws("x = np.hist([1])") and not figures.draws("y = torch.bar(1)")
    helpers = figures.plotters(["def dashboard(rows):\n    fig, ax = plt.subplots()\n    ax.plot(rows)\n"])
    assert helpers == {"dashboard"} and figures.draws("dashboard([1, 2])", helpers) and not figures.draws("rows = [1]", helpers)


# Slow experiment cells whose runs have not been re-executed since the lab's cache keys changed, counted per notebook
# (cell indices move when cells are added): the counts may only fall; any other notebook must have none.
NOT_YET = {}


def test_every_drawing_cell_holds_its_image():
    miss, n = figures.missing()
    assert n > 40, f"only {n} drawing cells found: the detector is broken"
    per_nb = {}
    for m in miss: per_nb.setdefault(m.split(" cell ")[0], []).append(m)
    over = {nb: cells for nb, cells in per_nb.items() if len(cells) > NOT_YET.get(nb, 0)}
    assert not over, (f"drawing cells without an image: {over}; execute them with "
                      "`python .ci/execute_nb.py nbs/X.ipynb --flags slow --cells i,j` and commit the outputs")
    fewer = {nb: k for nb, k in NOT_YET.items() if len(per_nb.get(nb, [])) < k}
    assert not fewer, f"these notebooks hold more images now: lower their count in NOT_YET: {fewer}"
