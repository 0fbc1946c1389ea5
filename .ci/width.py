"""The library's line-width rule: every line of rl_notes/*.py fits in 120 characters. Excepted: the generated
`_modidx.py`, and the `__all__` list nbdev writes (wrapped at 120 before its `__all__ = ` prefix). A long line is
fixed in the notebook cell it comes from (`nbs/`), then `nbdev_export`.

    python .ci/width.py [FILE ...]      # default: rl_notes/*.py; exit 1 and one line per long line
"""
import ast, sys
from pathlib import Path

WIDTH = 120


def long_lines(source: str, width: int = WIDTH) -> list:
    "(line number, length) of each line of `source` longer than `width`, outside a top-level `__all__ = [...]`."
    skip = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            skip.update(range(node.lineno, node.end_lineno + 1))
    return [(i, len(l)) for i, l in enumerate(source.split("\n"), 1) if len(l) > width and i not in skip]


def main(files) -> int:
    root = Path(__file__).resolve().parents[1]
    files = files or sorted(str(p) for p in (root / "rl_notes").glob("*.py") if p.name != "_modidx.py")
    bad = [(f, i, n) for f in files for i, n in long_lines(Path(f).read_text(encoding="utf-8"))]
    for f, i, n in bad: print(f"{f}:{i}: {n} characters, more than {WIDTH} (edit the notebook cell it comes from)")
    print(f"width: {len(files)} files, {len(bad)} lines over {WIDTH} characters")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
