"""The GPU check's own logic on any machine: the runner (subprocess per part, budgets, JSON), the notebook cells it runs, and
its benchmark parts at CPU sizes (the CUDA run itself is `make gpu-check`)."""
import importlib.util, json, os, subprocess, sys
from pathlib import Path
import pytest, torch

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / ".ci" / "gpu_check.py"

def load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m

gc = load()

class Ctx:
    def __init__(self): self.saved = []
    def left(self): return 1e9
    def save(self, res): self.saved.append(json.loads(json.dumps(res, default=str)))

def test_runner_records_each_outcome(tmp_path):
    "pass, fail (exception), skip, timeout (partial results kept), failed preparation: one record each, exit code 1."
    names = "selftest_pass,selftest_fail,selftest_skip,selftest_timeout,selftest_prepare"
    p = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--only", names], capture_output=True, text=True,
                       env={**os.environ, "GPU_CHECK_SELFTEST": "1"}, cwd=REPO)
    assert p.returncode == 1, p.stdout + p.stderr
    rep = json.loads((tmp_path / "gpu_check.json").read_text())
    got = {r["name"]: r for r in rep["parts"]}
    assert list(got) == names.split(",")
    assert (got["selftest_pass"]["status"], got["selftest_pass"]["result"]) == ("passed", {"x": 1})
    assert got["selftest_fail"]["status"] == "failed" and got["selftest_fail"]["reason"] == "ValueError: broken on purpose"
    assert "Traceback" in got["selftest_fail"]["traceback"]
    assert (got["selftest_skip"]["status"], got["selftest_skip"]["reason"]) == ("skipped", "nothing to do here")
    assert got["selftest_timeout"]["status"] == "failed" and got["selftest_timeout"]["reason"] == "timed out after 4 s"
    assert got["selftest_timeout"]["partial"] == {"started": True} and got["selftest_timeout"]["wall_s"] < 30   # killed, not waited for
    assert got["selftest_prepare"]["status"] == "failed" and "cell not found" in got["selftest_prepare"]["reason"]
    assert rep["env"]["torch"] == torch.__version__ and "selftest_timeout" in (tmp_path / "gpu_check.log").read_text()
    assert "selftest_fail" in p.stdout and "failed" in p.stdout   # the summary

def test_unknown_part(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--only", "nope"], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and "unknown part(s) ['nope']" in p.stderr

@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is the CPU path")
def test_dry_run_skips_every_cuda_part(tmp_path):
    "Without CUDA every real part is prepared (notebook cells found and compiled) and skipped: exit 0."
    p = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                       env={k: v for k, v in os.environ.items() if k != "GPU_CHECK_SELFTEST"})
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [(r["name"], r["status"], r["reason"]) for r in rep["parts"]] == [(n, "skipped", "no CUDA") for n in
            ("cuda_tests", "trainer_smoke", "bench", "logprob", "failure_d3")]

def test_trainer_cell_names_defined():
    "The trainer notebook's #| gpu cell runs in the namespace the check builds: every name it reads is defined there."
    import ast, builtins
    ns, cell = gc.trainer_namespace()
    tree = ast.parse(cell)
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert loaded - stored - set(dir(builtins)) - set(ns) == set()
    assert ns["small"]["steps"] >= 1 and "PRESETS" in ns

def test_notebook_cells_found():
    cells = gc.trainer_cells()
    assert "#| gpu" in cells[-1] and "small = dict(" in cells[1]
    assert "D3_ARMS" in gc.find_cell("53_dynamic_sampling.ipynb", "D3_ARMS", "sft4g", flag="gpu")
    with pytest.raises(ValueError, match="expected one code cell"): gc.find_cell("33_trainer.ipynb", "no such text anywhere")

def test_logprob_part_on_cpu():
    "The kernel comparison at a CPU size: every method and pass timed, errors small, ratios against TRL (or the plain baseline)."
    res = gc.part_logprob(Ctx(), device="cpu", shape=(2, 8, 300), dtype="bfloat16", repeats=1)
    meths = {r["method"] for r in res["rows"]}
    assert {"rl_notes", "rl_notes_ent", "naive"} <= meths and len(res["rows"]) == 2 * len(meths)
    assert res["reference"] == ("trl" if "trl" in meths else "naive")
    for r in res["rows"]:
        assert r["ms"] > 0 and r["peak_extra_GiB"] is None and r["ref_over_this"] > 0
        assert r["max_abs_err"] < 0.1, r                 # bf16 logits against a float64 reference of the same bf16 values

def test_summary_quotes_the_ratios():
    "The printed summary: one line per part, then the bench ratios, the kernel's time against the reference and the D3 verdict."
    lp = gc.part_logprob(Ctx(), device="cpu", shape=(1, 4, 50), dtype="float32", repeats=1)
    rep = {"env": {"torch": "2.11.0", "cuda_available": True, "device": "NVIDIA H200"}, "wall_s": 100.0, "parts": [
        {"name": "bench", "status": "passed", "wall_s": 50.0, "budget_s": 120, "result": {"sizes": [
            {"name": "char", "hf_full_over_rl_notes": 2.5, "trl_over_rl_notes": 3.25}, {"name": "big", "skipped": "time budget"}]}},
        {"name": "logprob", "status": "passed", "wall_s": 5.0, "budget_s": 30, "result": lp},
        {"name": "failure_d3", "status": "failed", "reason": "timed out after 70 s", "wall_s": 70.0, "budget_s": 70}]}
    out = gc.summary(rep)
    assert "yes: NVIDIA H200" in out and "timed out after 70 s" in out
    assert "char: HF generate+decode+logp / rl_notes 2.50x; TRL step / rl_notes 3.25x" in out and "big" not in out
    assert out.count("log-prob fwd") == 2 and "extra peak n/a the logits" in out   # fwd and fwd+bwd; no CUDA peak on a CPU
