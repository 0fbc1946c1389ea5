"The library's line-width rule (.ci/width.py, run by `make lint`): the checker on planted sources, then the library."
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("width", ROOT / ".ci" / "width.py")
width = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(width)


def test_long_lines_are_found_and_only_nbdev_all_is_excepted():
    long_all = "__all__ = [" + ", ".join(f"'name_{i}'" for i in range(30)) + "]"
    src = "\n".join(["x = 1", "y = '" + "a" * 130 + "'", long_all, "def f():", "    " + "# c" * 50, "    pass"])
    assert width.long_lines(src) == [(2, 136), (5, 154)]                  # the __all__ line (3) is nbdev's
    assert width.long_lines("x = 1\n" + "#" * 120) == []                  # 120 characters fit
    assert width.long_lines("x = 1", width=3) == [(1, 5)]


def test_the_library_keeps_the_rule(capsys):
    assert width.main([]) == 0, capsys.readouterr().out
