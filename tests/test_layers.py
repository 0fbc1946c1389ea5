"""The layer table of rl_notes, checked on every module's AST (imports inside functions included).

The table is the one of the house page ("Map of the notebooks", nbs/house.ipynb; README draws its layer picture from it): its rows give each module's layer and
order (a module may import the modules of earlier rows in its layer), and the table above it what third-party
packages each layer may import. Within L3 the loops (rows labelled "L3 loops") do not import each other; the rows after
them (the lab) may import any earlier L3 module.

No file I/O in L1 means: none of os, io, json, shutil, pathlib, safetensors is imported, and `open(` is never called.
An import inside a function or class is allowed only for a heavy third-party package (`HEAVY`), with a one-line reason
as a comment on its line or the line above; the command line (L4) may also import torch and rl_notes modules lazily (with a reason),
so that `rl_notes --help` does not load torch. A module that is not in the table fails too: a new module needs a row.
"""
import ast, io, json, re, sys, tokenize
from pathlib import Path

import pytest

PKG = "rl_notes"
ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / PKG
INDEX = ROOT / "nbs" / "house.ipynb"


def _map_text() -> str:
    "The markdown of the house page's 'Map of the notebooks' section."
    for c in json.loads(INDEX.read_text(encoding="utf-8"))["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "markdown" and src.startswith("## Map of the notebooks"): return src
    raise AssertionError(f"{INDEX}: no markdown cell starting with '## Map of the notebooks'")


def _rows(text:str, header:str) -> list[list[str]]:
    "The cells of the markdown table whose header line starts with `header` (the separator line skipped)."
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(header))
    out = []
    for l in lines[start + 2:]:
        if not l.startswith("|"): break
        out.append([c.strip() for c in l.strip().strip("|").split("|")])
    return out


def read_tables(text:str|None=None):
    "(layers: layer -> modules in row order, groups: module -> its layer label, third_party: layer -> allowed packages or None)."
    text = _map_text() if text is None else text
    layers, groups = {}, {}
    for row in _rows(text, "| layer | notebook | module |"):
        m = re.fullmatch(r"`rl_notes\.(\w+)`", row[2])
        if not m: continue                                     # a notebook without a module (experiments, guide)
        level = int(re.match(r"L(\d)", row[0]).group(1))
        layers.setdefault(level, []).append(m.group(1)); groups[m.group(1)] = row[0]
    third = {}
    for row in _rows(text, "| layer | may import"):
        level = int(row[0][1:])
        third[level] = None if row[1] == "anything" else set(re.findall(r"`([\w.]+)`", row[1].split(";")[0]))
    return layers, groups, third


LAYERS, GROUP, THIRD_PARTY = read_tables()
NO_FILE_IO = {1: {"os", "io", "json", "shutil", "pathlib", "safetensors"}}  # modules an L1 module may not import
INDEPENDENT = {"L3 loops"}  # rows with this label do not import each other (each loop stands alone)
HEAVY = {"transformers", "datasets", "pyarrow", "accelerate", "gymnasium", "matplotlib", "trl", "peft", "math_verify", "trackio", "wandb", "tensorboard",
         "torch.utils.tensorboard"}  # top-level packages, or a dotted module (that module and its submodules)
LAZY_L4 = {"torch", PKG}  # the CLI imports these inside its commands so that `--help` stays fast
LAZY_SETTINGS = {"trainconfig", "algo"}  # the settings the CLI imports for --help: they import torch-bearing rl_notes modules inside their checks only (algo: and on first use of a table)
# modules held to less than their layer allows: (third-party packages, rl_notes modules) they may import
ONLY = {"analysis": ({"numpy", "matplotlib"}, set()),  # run analysis: reads metrics.jsonl, imports nothing of training
        "runlogs": ({"numpy"}, {"responses"}),   # reads a run's logs (rl_notes, TRL, verl, CSV, TensorBoard, W&B): no torch, no training code
        "doctor": ({"numpy", "matplotlib"}, {"runlogs", "responses"})}
# optional readers of these modules: a log format's own library, imported only inside the function that needs it (with a heavy reason)
ONLY_NESTED = {"runlogs": {"tensorboard", "wandb", "pyarrow"}, "doctor": {"transformers"}}   # reads a run's logs (rl_notes, TRL, verl): no torch, no training code
EXEMPT = {"__init__", "_modidx"}  # nbdev's package files

LAYER_OF = {m: l for l, ms in LAYERS.items() for m in ms}
ORDER = {m: i for ms in LAYERS.values() for i, m in enumerate(ms)}
STDLIB = set(sys.stdlib_module_names)


def _modules():
    return sorted(p.stem for p in SRC.glob("*.py") if p.stem not in EXEMPT)


def _imports(tree: ast.Module, mod: str):
    "(node, imported module as a dotted name, nested: inside a def or class) for every import of the module."
    out = []
    def visit(node, nested):
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
            if isinstance(child, ast.Import):
                out.extend((child, a.name, nested) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:  # relative: from . import x / from .x import y, inside the package
                    base = PKG + ("." + child.module if child.module else "")
                    if child.module is None: out.extend((child, f"{PKG}.{a.name}", nested) for a in child.names)
                    else: out.append((child, base, nested))
                elif child.module == PKG:  # from rl_notes import core
                    out.extend((child, f"{PKG}.{a.name}" if (SRC / f"{a.name}.py").exists() else PKG, nested) for a in child.names)
                else:
                    out.append((child, child.module, nested))
            visit(child, inner)
    visit(tree, False)
    return out


def _comments(source: str) -> dict:
    "Line number -> comment text (tokenize: a '#' inside a string is not a comment)."
    return {t.start[0]: t.string.lstrip("#").strip() for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.COMMENT}


def _rule(mod: str, target: str):
    "Why `mod` may not import `target` (None if it may)."
    layer = LAYER_OF[mod]
    top = target.split(".")[0]
    if mod in ONLY and top not in STDLIB:
        pkgs, mods = ONLY[mod]
        if top == PKG and target != PKG and target.split(".")[1] not in mods | EXEMPT:
            return f"{mod} may import no {PKG} module except {sorted(mods)}, not {target}"
        if top != PKG and top not in pkgs: return f"{mod} may import only {sorted(pkgs)} among third-party packages, not `{top}`"
    if top == PKG:
        if target == PKG: return None  # the package itself (its __init__: the version)
        dep = target.split(".")[1]
        if dep in EXEMPT: return None
        if dep not in LAYER_OF: return f"{PKG}.{dep} is not in the layer table"
        dl = LAYER_OF[dep]
        if layer == 4 or dl < layer: return None
        if dl > layer: return f"{mod} (L{layer}) may not import {PKG}.{dep} (L{dl}, a higher layer)"
        if GROUP[mod] == GROUP[dep] and GROUP[mod] in INDEPENDENT:
            return f"{mod} may not import {PKG}.{dep}: the rows labelled {GROUP[mod]!r} do not import each other"
        if ORDER[dep] < ORDER[mod]: return None
        return f"{mod} (L{layer}) may import only earlier L{layer} modules {LAYERS[layer][:ORDER[mod]]}, not {PKG}.{dep}"
    if top in NO_FILE_IO.get(layer, set()):
        return f"{mod} (L{layer}) may not do file I/O: `{top}` is not allowed in L{layer}"
    if top in STDLIB: return None
    allowed = THIRD_PARTY[layer]
    if allowed is None or top in allowed: return None
    return f"{mod} (L{layer}) may not import the third-party package `{top}` (L{layer} allows {sorted(allowed)})"


def violations(mod: str) -> list[str]:
    "Every import or call of `mod` that breaks the table, as 'rl_notes/mod.py:line: `statement`: reason'."
    path = SRC / f"{mod}.py"
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    lines, comments = source.splitlines(), _comments(source)
    where = lambda node: f"{PKG}/{mod}.py:{node.lineno}: `{lines[node.lineno - 1].strip()}`"
    if mod not in LAYER_OF: return [f"{PKG}/{mod}.py: module `{mod}` is not in the layer table (nbs/index.ipynb, 'Map of the notebooks')"]
    out = []
    for node, target, nested in _imports(tree, mod):
        why = _rule(mod, target)
        if why and nested and target.split(".")[0] in ONLY_NESTED.get(mod, set()): why = None   # an optional reader's library
        if why: out.append(f"{where(node)}: {why}")
        if nested:
            top = target.split(".")[0]
            heavy = top in HEAVY or any(target == h or target.startswith(h + ".") for h in HEAVY if "." in h)
            if not heavy and not ((LAYER_OF[mod] == 4 or mod in LAZY_SETTINGS) and top in LAZY_L4):
                out.append(f"{where(node)}: `{target}` is imported inside a function; only heavy third-party packages "
                           f"{sorted(HEAVY)} may be (import it at the top of the module)")
            elif not any(comments.get(l) for l in range(node.lineno - 1, (node.end_lineno or node.lineno) + 1)):
                out.append(f"{where(node)}: function-level import of `{target}` needs a one-line reason as a comment "
                           "on its line or the line above")
    if LAYER_OF[mod] in NO_FILE_IO:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                out.append(f"{where(node)}: {mod} (L{LAYER_OF[mod]}) may not do file I/O: `open(` is called")
    return out


@pytest.mark.parametrize("mod", _modules())
def test_layer_imports(mod):
    bad = violations(mod)
    assert not bad, f"{len(bad)} layer violation(s) in {PKG}.{mod}:\n" + "\n".join(bad)


def test_every_table_module_exists():
    missing = [m for m in LAYER_OF if not (SRC / f"{m}.py").exists()]
    assert not missing, f"modules in the layer table but not in {SRC}: {missing}"


# ---- the checker itself, on planted sources

def _check(mod, source, tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    for m in LAYER_OF: (tmp_path / f"{m}.py").write_text("")
    (tmp_path / f"{mod}.py").write_text(source)
    return violations(mod)


def test_checker_catches_each_kind_of_violation(tmp_path, monkeypatch):
    assert _check("grpo", "import math\nimport torch\nfrom .core import agg_loss\nfrom .ppo import gae\n", tmp_path, monkeypatch) == []
    bad = _check("grpo", "def f():\n    from .trainer import lab_runs\n", tmp_path, monkeypatch)
    assert len(bad) == 2 and "rl_notes/grpo.py:2: `from .trainer import lab_runs`: grpo (L1) may not import rl_notes.trainer (L3" in bad[0]
    assert "`rl_notes.trainer` is imported inside a function" in bad[1]
    bad = _check("ppo", "from rl_notes import grpo\n", tmp_path, monkeypatch)
    assert bad == ["rl_notes/ppo.py:1: `from rl_notes import grpo`: ppo (L1) may import only earlier L1 modules [], not rl_notes.grpo"]
    assert "file I/O: `json`" in _check("dpo", "import json\n", tmp_path, monkeypatch)[0]
    assert "file I/O: `open(` is called" in _check("vapo", "def f(p):\n    return open(p).read()\n", tmp_path, monkeypatch)[0]
    assert "third-party package `numpy`" in _check("core", "import numpy as np\n", tmp_path, monkeypatch)[0]
    assert "third-party package `transformers`" in _check("rope", "def f():\n    import transformers  # heavy\n", tmp_path, monkeypatch)[0]
    assert _check("models", "def f():\n    from transformers import AutoModel  # heavy: loads the model zoo\n", tmp_path, monkeypatch) == []
    assert "needs a one-line reason" in _check("models", "def f():\n    from transformers import AutoModel\n", tmp_path, monkeypatch)[0]
    assert "needs a one-line reason" in _check("models", "def f():\n    s = '# not a comment'; import transformers\n", tmp_path, monkeypatch)[0]
    assert "only heavy third-party" in _check("trainer", "def f():\n    import numpy  # lazy\n", tmp_path, monkeypatch)[0]
    assert _check("trainer", "def f():\n    from torch.utils.tensorboard import W  # heavy: loads tensorboard\n", tmp_path, monkeypatch) == []
    assert "only heavy third-party" in _check("trainer", "def f():\n    from torch.utils.data import D  # lazy\n", tmp_path, monkeypatch)[0]
    assert _check("lab", "from .trainer import train\n", tmp_path, monkeypatch) == []
    assert "may import only earlier L3 modules" in _check("trainer", "from .lab import lab_runs\n", tmp_path, monkeypatch)[0]
    assert "'L3 loops' do not import each other" in _check("trainer", "from .sft import sft_train\n", tmp_path, monkeypatch)[0]
    assert _check("lab", "from .sft import sft_train\nfrom .preference import train_dpo\n", tmp_path, monkeypatch) == []
    assert "may import only earlier L2 modules" in _check("models", "from .rollout import evaluate\n", tmp_path, monkeypatch)[0]
    assert _check("rundir", "from .checkpoint import save_checkpoint\nfrom .configs import validate_config\n", tmp_path, monkeypatch) == []
    assert _check("cli", "import os\nfrom .trainer import train\nimport yaml\n", tmp_path, monkeypatch) == []
    assert _check("cli", "def f():\n    from rl_notes.trainer import train  # heavy: loads torch\n", tmp_path, monkeypatch) == []
    assert "needs a one-line reason" in _check("cli", "def f():\n    import torch\n", tmp_path, monkeypatch)[0]
    assert "only heavy third-party" in _check("cli", "def f():\n    import json\n", tmp_path, monkeypatch)[0]
    assert _check("analysis", "import json\nimport numpy as np\ndef f():\n    import matplotlib  # heavy: plots only\n", tmp_path, monkeypatch) == []
    assert "may import no rl_notes module" in _check("analysis", "from .checkpoint import MetricsLog\n", tmp_path, monkeypatch)[0]
    assert "only ['matplotlib', 'numpy'] among third-party" in _check("doctor", "import torch\n", tmp_path, monkeypatch)[0]
    assert "a higher layer" in _check("lab", "from .analysis import curves\n", tmp_path, monkeypatch)[0]
    assert "not in the layer table" in _check("lab", "from .newthing import x\n", tmp_path, monkeypatch)[0]
    (tmp_path / "newthing.py").write_text("")
    assert "module `newthing` is not in the layer table" in violations("newthing")[0]


# ---- the table itself: one table, on the house page, drawn in README and read by this test

def test_readme_picture_is_drawn_from_the_table():
    "README.md's layer picture is the house page's table, layer by layer, every module in the table's order."
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for label in dict.fromkeys(GROUP.values()):
        mods = [m for m, g in GROUP.items() if g == label]
        row = next((l for l in readme.splitlines() if l.startswith(label + " ")), None)
        assert row is not None and row.split(None, len(label.split()))[-1] == " · ".join(mods), \
            f"README.md's layer picture differs from nbs/house.ipynb's table at {label!r} (run `python .ci/readme.py`)"


def test_table_reader():
    layers, groups, third = read_tables()
    assert layers[0] == ["core", "rope", "responses"] and layers[4][-2:] == ["cli", "trl_trainer"]
    assert layers[2][:5] == ["configs", "algo", "trainconfig", "data", "tasks"] and groups["sft"] == "L3 loops" and groups["lab"] == "L3 lab"
    assert third[0] == {"torch"} and third[4] is None and "transformers" in third[2] and "os" not in third[1]
    # a new module is a new row: here one between the loops and the lab
    text = _map_text().replace("| L3 lab | `37_lab` |", "| L3 lab | `16a_new` | `rl_notes.newmod` | a new room |\n| L3 lab | `37_lab` |")
    layers, groups, _ = read_tables(text)
    assert layers[3][-2:] == ["newmod", "lab"] and groups["newmod"] == "L3 lab"
    assert len(LAYER_OF) == sum(map(len, LAYERS.values())), "a module is listed twice in the map"


# ---- tests are named after the module they test

PROJECT_TESTS = {  # checks of the project as a whole, not of one module
    "accelerate": "the trainer under accelerate's data parallel (two processes)", "claims": "the claims page", "figures": "committed figures",
    "gpu": "the CUDA paths", "gpu_cells": "the notebooks' #| gpu cells", "gpu_check": ".ci/gpu_check.py", "layers": "this file",
    "makefile": "the Makefile", "numbers": "numbers in prose", "packaging": "the wheel", "verdicts": "the verdict surfaces",
    "words": "the words of the notebooks", "nothing_lost": "a user's files across the command line's failures",
    "width": ".ci/width.py (the library's line width)"}

def test_tests_are_named_after_their_module():
    mods = {p.stem for p in SRC.glob("*.py") if not p.stem.startswith("_")}
    bad = [p.name for p in sorted((ROOT / "tests").glob("test_*.py"))
           if not any(p.stem[5:] == m or p.stem[5:].startswith(m + "_") for m in mods | set(PROJECT_TESTS))]
    assert not bad, f"test files not named after a module of {PKG} (test_<module>[_<topic>].py) nor in PROJECT_TESTS: {bad}"


def private_imports(source: str) -> list[str]:
    "`module.name` for every private name (a leading underscore) the source imports from another module of the package."
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == PKG):
            out += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return out


def test_no_private_name_crosses_a_module():
    bad = {mod: names for mod in _modules() if (names := private_imports((SRC / f"{mod}.py").read_text()))}
    assert not bad, f"private names imported from another module (make them public, or keep them in one room): {bad}"


def test_private_import_checker():
    assert private_imports("from .core import _x, y\nfrom rl_notes.data import _z\nimport os\nfrom os import _exit") == ["core._x", "rl_notes.data._z"]
    assert private_imports("def f():\n    from .models import _quiet\n") == ["models._quiet"]


# ---- the notebooks' code cells: an algorithm notebook (1x) or the lab's substrate (2x) shows its mechanism with its own
# layer's functions and the layers below; runs on the lab (the trainer, the lab, the analysis) live in 5x notebooks

NB_LAYER = {"0": 0, "1": 2, "2": 2}   # a notebook's first digit -> the highest layer its code cells may import

def notebook_imports(path) -> list[str]:
    "The rl_notes modules the code cells of notebook `path` import."
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    src = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return sorted(set(re.findall(r"^\s*(?:from|import)\s+rl_notes\.(\w+)", src, re.M)))

def test_algorithm_notebooks_import_no_loop_or_tool():
    bad = {p.name: [m for m in notebook_imports(p) if LAYER_OF.get(m, 9) > NB_LAYER[p.name[0]]]
           for p in sorted((ROOT / "nbs").glob("[012]*.ipynb"))}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"0x-2x notebooks importing modules above L2 (move the run to a 5x notebook): {bad}"
