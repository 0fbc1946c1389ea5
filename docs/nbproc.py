"""nbdev's docs processing of one notebook, for docs/build.py (a module of its own so spawned workers can import it).

The same processors as `nbdev_docs` (nbdev.processors.FilterDefaults) with one change: nbdev's `exec_show_docs`
runs every cell that contains an import, so a cell that imports *and* runs an experiment is re-run (minutes) and
fails when it needs variables from cells that are not run. Here such a cell runs only its import statements and keeps
its committed outputs; exported cells and `show_doc` cells run as in nbdev. The cells nbdev would have re-run are
reported, because Quarto's `nbdev_docs` still trips over them.
"""
import ast, warnings
from pathlib import Path

def _procs():
    from nbdev import processors as P

    class exec_show_docs_imports_only(P.exec_show_docs):
        "`exec_show_docs`, except that from a cell mixing imports with other code only the imports run."
        mixed = []
        def __call__(self, cell):
            if not self.nb.has_docs_ or not hasattr(self, 'k'): return
            fm = getattr(self.nb, 'frontmatter_', {})
            if P.str2bool(fm.get('skip_showdoc', False)): return
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                if not P._do_eval(cell): return
            trees = cell.parsed_()
            full = (cell.directives_.keys() & {'export', 'exports', 'exporti', 'exec_doc'}) or P._show_docs(trees)
            imports = [n for n in trees if isinstance(n, (ast.Import, ast.ImportFrom))]   # top-level statements
            others = [n for n in trees if n not in imports]
            if full or not others: self.k.cell(cell)
            else:
                type(self).mixed.append(cell.idx_)
                self.k.run('\n'.join(ast.unparse(n) for n in imports))
            if self.k.exc:
                raise Exception(f"Error in notebook {fm.get('title', '')!r}, cell {cell.idx_}:\n{cell.source}") from self.k.exc

    class Filter(P.FilterDefaults):
        def base_procs(self):
            return [exec_show_docs_imports_only if p is P.exec_show_docs else p for p in super().base_procs()]
    return Filter, exec_show_docs_imports_only

def proc_one(args):
    "Worker: process notebook `src` into `dst`; returns (error or None, indices of import-and-code cells)."
    src, dst = args
    warnings.simplefilter('ignore')
    try:
        import nbdev.serve_drv
        Filter, proc = _procs()
        nbdev.serve_drv.main((Path(src), Path(dst), Filter))
        return None, list(proc.mixed)
    except BaseException as e:
        Path(dst).unlink(missing_ok=True)
        return f'{type(e).__name__}: {e}'.strip()[:1500], []
