"""Worker for docs/build.py (a module of its own so that spawned processes can import it)."""
from pathlib import Path

def proc_one(args):
    "Worker: nbdev's docs processors on one notebook (what `nbdev_docs` runs per notebook before Quarto)."
    src, dst = args
    import warnings; warnings.simplefilter('ignore')
    try:
        import nbdev.serve_drv
        from nbdev.processors import FilterDefaults
        nbdev.serve_drv.main((Path(src), Path(dst), FilterDefaults))
        return None
    except BaseException as e:
        Path(dst).unlink(missing_ok=True)
        return f'{type(e).__name__}: {e}'.strip()[:1500]
