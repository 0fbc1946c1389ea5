"""The layer table of rl_notes, checked on every module's AST (imports inside functions included).

| layer | modules | may import |
|---|---|---|
| L0 | core, rope | torch, the standard library |
| L1 | ppo, grpo, dapo, vapo, dpo, family, offpolicy (in that order) | L0, earlier L1; torch only among third-party packages; no file I/O |
| L2 | data, tasks, rollout, checkpoint, models (in that order) | L0-L1, earlier L2, transformers, tokenizers, datasets, safetensors, numpy, tqdm, math_verify, peft |
| L3 | trainer, preference, control, fingerprint, lab | L0-L2, accelerate, numpy, tqdm, gymnasium, matplotlib, safetensors (weight files), peft, tensorboard, trackio; fingerprint may import trainer, lab trainer and fingerprint, nothing else within L3 |
| L4 | analysis, doctor, cli (in that order) | cli: anything; analysis and doctor: the standard library, numpy and matplotlib, no torch (training never depends on them) |

No file I/O in L1 means: none of os, io, json, shutil, pathlib, safetensors is imported, and `open(` is never called.
An import inside a function or class is allowed only for a heavy third-party package (`HEAVY`), with a one-line reason
as a comment on the same line; the command line (L4) may also import torch and rl_notes modules lazily (with a reason),
so that `rl_notes --help` does not load torch. A module that is not in the table fails too: a new module needs a layer.
"""
import ast, io, sys, tokenize
from pathlib import Path

import pytest

PKG = "rl_notes"
SRC = Path(__file__).resolve().parents[1] / PKG

LAYERS = {  # layer -> modules, in the order in which later modules may import earlier ones
    0: ["core", "rope"],
    1: ["ppo", "grpo", "dapo", "vapo", "dpo", "family", "offpolicy"],
    2: ["data", "tasks", "rollout", "checkpoint", "models"],
    3: ["trainer", "preference", "control", "fingerprint", "lab"],
    4: ["analysis", "doctor", "cli"],
}
THIRD_PARTY = {  # third-party packages each layer may import (the standard library is allowed everywhere)
    0: {"torch"},
    1: {"torch"},
    2: {"torch", "transformers", "tokenizers", "datasets", "safetensors", "numpy", "tqdm", "math_verify", "peft"},
    3: {"torch", "accelerate", "numpy", "tqdm", "gymnasium", "matplotlib", "safetensors", "peft", "tensorboard", "trackio"},
    4: None,  # anything
}
NO_FILE_IO = {1: {"os", "io", "json", "shutil", "pathlib", "safetensors"}}  # modules an L1 module may not import
SAME_LAYER = {3: {"fingerprint": {"trainer"}, "lab": {"trainer", "fingerprint"}}}  # L3: only these imports within the layer (the fingerprint runs trainer micro runs, lab runs trainer jobs keyed by the fingerprint)
# modules held to less than their layer allows: (third-party packages, rl_notes modules) they may import
ONLY = {"analysis": ({"numpy", "matplotlib"}, set())}  # run analysis: reads metrics.jsonl, imports nothing of training
HEAVY = {"transformers", "datasets", "accelerate", "gymnasium", "matplotlib", "trl", "peft", "math_verify", "trackio", "tensorboard",
         "torch.utils.tensorboard"}  # top-level packages, or a dotted module (that module and its submodules)
LAZY_L4 = {"torch", PKG}  # the CLI imports these inside its commands so that `--help` stays fast
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
        allowed = SAME_LAYER.get(layer)
        if allowed is not None:
            if dep in allowed.get(mod, set()): return None
            return f"{mod} (L{layer}) may not import {PKG}.{dep}: within L{layer} only {dict(allowed)} are allowed"
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
    if mod not in LAYER_OF: return [f"{PKG}/{mod}.py: module `{mod}` is not in the layer table (tests/test_layers.py LAYERS)"]
    out = []
    for node, target, nested in _imports(tree, mod):
        why = _rule(mod, target)
        if why: out.append(f"{where(node)}: {why}")
        if nested:
            top = target.split(".")[0]
            heavy = top in HEAVY or any(target == h or target.startswith(h + ".") for h in HEAVY if "." in h)
            if not heavy and not (LAYER_OF[mod] == 4 and top in LAZY_L4):
                out.append(f"{where(node)}: `{target}` is imported inside a function; only heavy third-party packages "
                           f"{sorted(HEAVY)} may be (import it at the top of the module)")
            elif not any(comments.get(l) for l in range(node.lineno, (node.end_lineno or node.lineno) + 1)):
                out.append(f"{where(node)}: function-level import of `{target}` needs a one-line reason as a comment on its line")
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
    assert "within L3 only" in _check("trainer", "from .lab import lab_runs\n", tmp_path, monkeypatch)[0]
    assert _check("cli", "import os\nfrom .trainer import train\nimport yaml\n", tmp_path, monkeypatch) == []
    assert _check("cli", "def f():\n    from rl_notes.trainer import train  # heavy: loads torch\n", tmp_path, monkeypatch) == []
    assert "needs a one-line reason" in _check("cli", "def f():\n    import torch\n", tmp_path, monkeypatch)[0]
    assert "only heavy third-party" in _check("cli", "def f():\n    import json\n", tmp_path, monkeypatch)[0]
    assert "not in the layer table" in _check("lab", "from .newthing import x\n", tmp_path, monkeypatch)[0]
    assert _check("analysis", "import json\nimport numpy as np\ndef f():\n    import matplotlib  # heavy: plots only\n", tmp_path, monkeypatch) == []
    assert "may import no rl_notes module" in _check("analysis", "from .checkpoint import MetricsLog\n", tmp_path, monkeypatch)[0]
    assert "only ['matplotlib', 'numpy'] among third-party" in _check("analysis", "import torch\n", tmp_path, monkeypatch)[0]
    assert "a higher layer" in _check("lab", "from .analysis import curves\n", tmp_path, monkeypatch)[0]
    (tmp_path / "newthing.py").write_text("")
    assert "module `newthing` is not in the layer table" in violations("newthing")[0]
