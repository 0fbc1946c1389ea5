"""Every `#| gpu` notebook cell in one run: on a CUDA machine each notebook that has one is executed in place (its unflagged
cells, then its `#| gpu` cells; `#| slow` cells keep their stored outputs), under its own time budget, and the executed
notebooks are copied to $OUT so their outputs come back; gpu_cells.json records each notebook's status and seconds.

Without CUDA (the dry run `make test` runs) nothing executes: each `#| gpu` cell is compiled, and every name it reads
must be defined by the notebook's unflagged cells before it or by the cell itself (a `#| slow` cell does not run on the
GPU machine, so a name only it defines would fail there). The notebooks in `NEEDS_SLOW` are known to read names that their
`#| slow` cells define (their GPU cells scale an experiment after its CPU runs, in the same kernel); they are run with
`--flags slow,gpu` on a GPU machine only when asked (`--with-slow`). Exit 1 on a cell that does not compile, or on a
notebook outside `NEEDS_SLOW` whose `#| gpu` cell reads a name nothing before it defines.

    python .ci/gpu_cells.py [--out DIR] [--only 50c_dapo_ladder,33_trainer] [--dry] [--scale 1.0] [--with-slow]
"""
import argparse, ast, json, os, re, shutil, subprocess, sys, time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NBS = REPO / "nbs"
FLAG = re.compile(r"^#\|\s*(slow|gpu|notest)\b", re.M)
BUDGET_S = {"33_trainer": 120, "50c_dapo_ladder": 90, "50d_vapo_lab": 90, "53_dynamic_sampling": 120}  # the rest: DEFAULT_S each
DEFAULT_S = 60
# notebooks whose `#| gpu` cells read what their `#| slow` cells define (constants, SFT starts, CPU results they compare with)
NEEDS_SLOW = {nb: "the GPU cell scales the experiment of the notebook's slow cells and reads their constants and results"
              for nb in ("50b_grpo_lab", "50c_dapo_ladder", "50d_vapo_lab", "50e_dpo_lab", "51_clip_higher", "52_rare_tokens", "53_dynamic_sampling",
                         "54_length_bias", "55_overlong", "56_value_init")}

def gpu_notebooks(only=None) -> list[Path]:
    "Notebooks with at least one `#| gpu` cell (those named in `only`, when given)."
    out = []
    for p in sorted(NBS.glob("*.ipynb")):
        if only and p.stem not in only: continue
        cells = json.loads(p.read_text(encoding="utf-8"))["cells"]
        if any(c["cell_type"] == "code" and "gpu" in FLAG.findall("".join(c["source"])) for c in cells): out.append(p)
    return out

def _code(src:str) -> str:
    "A cell's source as Python: IPython lines (%magic, !shell) dropped."
    return "\n".join("" if l.lstrip().startswith(("%", "!")) else l for l in src.splitlines())

def _names(tree) -> tuple[set, set]:
    "(names the code binds at any level, names it reads that it may not bind before reading), roughly as pyflakes sees them."
    bound, read = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name): (bound if isinstance(n.ctx, (ast.Store, ast.Del)) else read).add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)): bound |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.arg): bound.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name: bound.add(n.name)
        elif isinstance(n, ast.alias) and n.name == "*": bound.add("*")
    return bound, read

def dry(path:Path) -> list[str]:
    "Problems of the notebook's `#| gpu` cells: a syntax error, or names defined only by skipped cells (or nowhere)."
    import builtins
    known, problems = set(dir(builtins)) | {"__file__", "get_ipython", "display", "In", "Out"}, []
    star = False
    for i, c in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if c["cell_type"] != "code": continue
        src = "".join(c["source"]); flags = set(FLAG.findall(src))
        if flags - {"gpu"}: continue                                   # slow / notest: not run on the GPU machine
        try: tree = ast.parse(_code(src))
        except SyntaxError as e: problems.append(f"{path.name} cell {i}: {e}"); continue
        bound, read = _names(tree)
        star |= "*" in bound
        if "gpu" in flags and not star:
            missing = sorted(read - bound - known)
            if missing: problems.append(f"{path.name} cell {i} (#| gpu) reads {missing}, which no unflagged cell before it defines")
        known |= bound
    return problems

def run_one(path:Path, out:Path, budget:float) -> dict:
    "Execute the notebook in place (unflagged + gpu cells; NEEDS_SLOW ones with their slow cells) in a subprocess under `budget` seconds; copy it to `out`."
    t0 = time.time()
    flags = "slow,gpu" if path.stem in NEEDS_SLOW else "gpu"
    try:
        p = subprocess.run([sys.executable, str(REPO / ".ci" / "execute_nb.py"), str(path), "--flags", flags], capture_output=True,
                           text=True, timeout=budget, cwd=REPO)
        status = "passed" if p.returncode == 0 else "failed"
        reason = "" if p.returncode == 0 else (p.stderr.strip() or p.stdout.strip()).splitlines()[-1][:500]
    except subprocess.TimeoutExpired: status, reason = "failed", f"timed out after {budget:.0f} s"
    if status == "passed": shutil.copy(path, out / path.name)
    return {"notebook": path.stem, "status": status, "reason": reason, "wall_s": round(time.time() - t0, 1), "budget_s": budget}

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu_cells_out")
    ap.add_argument("--only", default=None, help="comma-separated notebook stems")
    ap.add_argument("--dry", action="store_true", help="check the cells without running them (the default without CUDA)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every notebook's time budget")
    ap.add_argument("--with-slow", action="store_true", help="also the NEEDS_SLOW notebooks, with their slow cells (hours of CPU-sized runs)")
    a = ap.parse_args(argv)
    nbs = gpu_notebooks(set(a.only.split(",")) if a.only else None)
    try:
        import torch; cuda = torch.cuda.is_available()
    except Exception: cuda = False
    if not a.with_slow: nbs = [nb for nb in nbs if nb.stem not in NEEDS_SLOW] + [nb for nb in nbs if nb.stem in NEEDS_SLOW and a.only]
    known = [p for nb in gpu_notebooks(set(a.only.split(",")) if a.only else None) if nb.stem in NEEDS_SLOW for p in dry(nb) if "cell" in p and "reads" in p]
    problems = [p for nb in nbs if nb.stem not in NEEDS_SLOW for p in dry(nb)]
    problems += [p for nb in gpu_notebooks(None) if nb.stem in NEEDS_SLOW for p in dry(nb) if "reads" not in p]   # compile errors count everywhere
    n_cells = sum(FLAG.findall("".join(c["source"])).count("gpu") for nb in nbs for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
    print(f"gpu_cells: {n_cells} `#| gpu` cells in {len(nbs)} notebooks; total budget {sum(BUDGET_S.get(n.stem, DEFAULT_S) for n in nbs) * a.scale:.0f} s")
    for p in problems: print("  " + p)
    print(f"  {len(known)} notebook(s) need their slow cells first (NEEDS_SLOW; run with --with-slow on a GPU machine): "
          + ", ".join(sorted({k.split('.ipynb')[0] for k in known})))
    if a.dry or not cuda:
        print(f"dry run ({'asked' if a.dry else 'no CUDA'}): every cell compiled; {len(problems)} problem(s)")
        return 1 if problems else 0
    out = Path(a.out).resolve(); out.mkdir(parents=True, exist_ok=True)
    report = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "notebooks": []}
    for nb in nbs:
        r = run_one(nb, out, BUDGET_S.get(nb.stem, DEFAULT_S) * a.scale)
        report["notebooks"].append(r); (out / "gpu_cells.json").write_text(json.dumps(report, indent=1))
        print(f"  {r['notebook']:<22} {r['status']:<7} {r['wall_s']:6.1f} s / {r['budget_s']:.0f} s  {r['reason']}", flush=True)
    return 1 if any(r["status"] != "passed" for r in report["notebooks"]) else 0

if __name__ == "__main__": sys.exit(main())
