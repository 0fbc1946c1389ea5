"""The GPU path in one run: CUDA tests, the trainer notebook's `#| gpu` smoke cell, GRPO step and generation against
TRL / Hugging Face, the log-prob kernel at V = 151936 in bf16, and a short failure-mode run (D3).

Each part runs in its own subprocess with its own time budget and is recorded as passed, failed or skipped with the
reason; the JSON (gpu_check.json) is rewritten after every part, so a run cut short keeps what finished. Without CUDA
every CUDA part is skipped ("no CUDA") after its cheap preparation (the notebook cells are found and compiled), which is
the dry run `make test` runs.

    python .ci/gpu_check.py [--out DIR] [--only part,part] [--scale 1.0]      # DIR: $OUT, else ./gpu_check_out
"""
import argparse, ast, contextlib, io, json, math, os, platform, statistics, subprocess, sys, tempfile, time, traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent

class Skip(Exception):
    "Raised by a part (or its preparation) that cannot run here; the message is the reason."

def has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception: return False

def dist_version(name:str) -> str|None:
    "Installed version of a distribution, None when absent."
    import importlib.metadata as md
    try: return md.version(name)
    except md.PackageNotFoundError: return None

# ---------------------------------------------------------------- notebook cells
def nb_cells(nb:str) -> list[str]:
    "Sources of the code cells of nbs/`nb`."
    cells = json.loads((REPO / "nbs" / nb).read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]

def find_cell(nb:str, *needles:str, flag:str|None=None) -> str:
    "The one code cell of `nb` that contains every needle (and the `#| flag` directive when given); compiled to check it."
    hits = [s for s in nb_cells(nb) if all(n in s for n in needles) and (flag is None or f"#| {flag}" in s.splitlines()[:3])]
    if len(hits) != 1: raise ValueError(f"{nb}: expected one code cell with {needles} (flag {flag!r}), found {len(hits)}")
    ast.parse(hits[0], filename=nb)
    return hits[0]

def trainer_cells() -> list[str]:
    "The cells the trainer notebook's `#| gpu` smoke cell needs, in order: test imports, the micro model and `small`, the cell."
    return [find_cell("33_trainer.ipynb", "from fastcore.test import"), find_cell("33_trainer.ipynb", "small = dict(", "micro = "),
            find_cell("33_trainer.ipynb", "PRESETS", "get_device_name", flag="gpu")]

# ---------------------------------------------------------------- timing helpers
def sync(device:str):
    import torch
    if device.startswith("cuda"): torch.cuda.synchronize()

def timed(f, device:str, repeats:int) -> tuple[float, object]:
    "Median wall time of `repeats` calls of f (synchronised on CUDA) and the last result."
    ts, out = [], None
    for _ in range(repeats):
        sync(device); t0 = time.perf_counter(); out = f(); sync(device); ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out

# ---------------------------------------------------------------- parts
def part_cuda_tests(ctx):
    "tests/test_gpu.py: two steps of every preset on CUDA, device asserts, one resume (pytest in this process)."
    import pytest, xml.etree.ElementTree as ET
    xml = ctx.out / "test_gpu.xml"
    rc = pytest.main(["-q", "-rA", "-p", "no:cacheprovider", f"--junitxml={xml}", str(REPO / "tests" / "test_gpu.py")])
    t = ET.parse(xml).getroot(); t = t if t.tag == "testsuite" else t.find("testsuite")
    res = {k: int(t.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    res["failed_tests"] = [c.get("name") for c in t.iter("testcase") if c.find("failure") is not None or c.find("error") is not None]
    ctx.save(res)
    if rc != 0: raise RuntimeError(f"pytest exit code {int(rc)}: {res['failures']} failed, {res['errors']} errors of {res['tests']}")
    return res

def trainer_namespace() -> tuple[dict, str]:
    """The namespace the trainer notebook's `#| gpu` smoke cell runs in (the module's globals, the test imports, the micro model
    and `small`: CPU, seconds) and the cell's source."""
    import rl_notes.trainer as trainer
    *setup, cell = trainer_cells()
    ns = dict(vars(trainer)); ns["__name__"] = "__gpu_check__"
    for src in setup: exec(compile(src, "nbs/33_trainer.ipynb", "exec"), ns)
    return ns, cell

def part_trainer_smoke(ctx):
    "The `#| gpu` cell of nbs/33_trainer.ipynb (two steps of every preset), after the cells it needs."
    ns, cell = trainer_namespace()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf): exec(compile(cell, "nbs/33_trainer.ipynb", "exec"), ns)
    print(buf.getvalue())
    return {"output": buf.getvalue().splitlines()}

def char_model(scratchpad:bool):
    "bench_real's SFT warm start of the character tiny Llama on 1-2 digit addition (cached in runs/cache)."
    from rl_notes.lab import sft_warm_start
    from rl_notes.sft import SFTConfig
    kw = dict(max_digits=2, scratchpad=scratchpad)
    return str(sft_warm_start("addition", SFTConfig(steps=300, n_train=8000, eval_n=0), progress=False, cache_dir=str(REPO / "runs" / "cache"), **kw)), kw

def bench_sizes(tmp:str, quick:bool=False) -> list[dict]:
    "bench_real's three sizes and a larger Qwen2 with Qwen's vocabulary (V = 151936, d = 768 x 8 layers) that only fits a GPU."
    from rl_notes.models import save_tiny_chat_model
    def qwen(name, **kw):
        p = Path(tmp) / name
        if not (p / "model.safetensors").exists(): save_tiny_chat_model(p, seed=0, **kw)
        return str(p)
    if quick:   # the dry run's size: seconds on a CPU
        return [dict(name="tiny Qwen2 (dry run)", model=qwen("q", vocab_size=512, hidden_size=32, num_layers=1), kw=dict(max_digits=2, scratchpad=False),
                     n=2, G=2, T=4, chat=True)]
    (c6, k6), (c42, k42) = char_model(False), char_model(True)
    return [dict(name="char Llama, 6 new tokens", model=c6, kw=k6, n=16, G=8, T=6, chat=False),
            dict(name="char Llama, 42 new tokens (scratchpad)", model=c42, kw=k42, n=16, G=8, T=42, chat=False),
            dict(name="random Qwen2, V=32000, 64 new tokens", model=qwen("qwen2-20m", vocab_size=32000, hidden_size=256, num_layers=4),
                 kw=k6, n=4, G=4, T=64, chat=True),
            dict(name="random Qwen2, V=151936, d=768 x 8 layers, 128 new tokens (GPU only)",
                 model=qwen("qwen2-large", vocab_size=151936, hidden_size=768, num_layers=8), kw=k6, n=16, G=8, T=128, chat=True)]

def bench_generation(size:dict, prompts:list, device:str, repeats:int) -> dict:
    "rl_notes `generate` vs HF `model.generate` + decode + log-prob pass, and `model.generate` alone: median wall seconds."
    import torch
    from transformers import GenerationConfig
    from rl_notes.models import load_model
    from rl_notes.rollout import generate, response_logprobs, Rollout, _eos_ids, _pad_id
    from rl_notes.data import render_prompts
    model, tok = load_model(size["model"]); model.to(device).eval()
    G, T = size["G"], size["T"]
    eos = _eos_ids(model, tok); pad = _pad_id(tok, eos)
    gc = GenerationConfig(max_new_tokens=T, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad, eos_token_id=eos,
                          disable_compile=True)
    def ours(): return int(generate(model, tok, prompts, G, T, seed=0).response_mask.sum())
    def hf(with_rest=True):
        texts, special = render_prompts(tok, prompts)
        enc = tok(texts, padding=True, padding_side="left", add_special_tokens=special, return_tensors="pt").to(device)
        ids, att = enc["input_ids"].repeat_interleave(G, 0), enc["attention_mask"].repeat_interleave(G, 0)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=att, generation_config=gc)
            resp = out[:, ids.shape[1]:]
            is_eos = torch.isin(resp, torch.tensor(eos, device=resp.device))
            rmask = ((is_eos.long().cumsum(-1) - is_eos.long()) == 0).long()
            if with_rest:
                tok.batch_decode(resp.masked_fill(~rmask.bool(), pad).cpu(), skip_special_tokens=True)
                ro = Rollout(out, torch.cat([att, rmask], 1), rmask, torch.zeros(rmask.shape, device=resp.device), ~is_eos.any(-1), [],
                             ids.shape[1], G)
                response_logprobs(model, ro)
        return int(rmask.sum())
    meths = {"rl_notes": ours, "hf_full": hf, "hf_generate": lambda: hf(False)}
    for f in meths.values(): f()                                           # warm-up
    res = {k: timed(f, device, repeats) for k, f in meths.items()}
    return {"n_params": sum(p.numel() for p in model.parameters()), **{f"{k}_s": t for k, (t, _) in res.items()},
            **{f"{k}_tokens": n for k, (_, n) in res.items()}}

# TRL's GRPOConfig defaults to bf16 autocast and gradient checkpointing; rl_notes' TrainConfig trains in float32 without
# checkpointing: the same settings on both sides
TRL_KW = dict(bf16=False, gradient_checkpointing=False)

def bench_step(size:dict, device:str, steps:int, warmup:int, tmp:str, with_trl:bool) -> dict:
    "One GRPO step of rl_notes.trainer vs TRL's GRPOTrainer (benchmarks/bench_grpo_step.py), median wall seconds."
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_grpo_step as bg
    from types import SimpleNamespace
    from rl_notes.tasks import get_task
    a = SimpleNamespace(steps=steps, warmup=warmup, n_prompts=size["n"], G=size["G"], max_new_tokens=size["T"], threads=None,
                        use_cpu=not device.startswith("cuda"), trl_kw=TRL_KW)
    d = tempfile.mkdtemp(dir=tmp)
    res = {"rl_notes_step_s": statistics.median(bg.ours(size["model"], size["kw"], a, d)["step"])}
    if with_trl:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            res["trl_step_s"] = statistics.median(bg.trl(size["model"], get_task("addition", **size["kw"]), a, d)["step"])
        res["trl_over_rl_notes"] = res["trl_step_s"] / res["rl_notes_step_s"]
    return res

def part_bench(ctx, device="cuda", quick=False, repeats=3, steps=3, warmup=1):
    "GRPO step and generation at bench_real's three sizes plus a GPU-only one; ratios measured in the same run."
    from rl_notes.tasks import get_task
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error(); hf_logging.disable_progress_bar()
    with_trl = dist_version("trl") is not None
    res = {"trl": dist_version("trl") or "not installed: TRL steps skipped", "trl_kw": TRL_KW, "sizes": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i, size in enumerate(bench_sizes(tmp, quick)):
            need = 60 if i == 3 else 15            # rough seconds a size needs on an H200 (the large one: generation + 8 steps)
            if ctx.left() < need: res["sizes"].append({"name": size["name"], "skipped": f"time budget: {ctx.left():.0f} s left"}); continue
            t0 = time.time()
            prompts = list(get_task("addition", **size["kw"]).dataset(size["n"], seed=0)["prompt"])
            if size["chat"]: prompts = [[{"role": "user", "content": f"What is {p[:-1]}?"}] for p in prompts]
            row = {"name": size["name"], "prompts_x_G": f"{size['n']} x {size['G']}", "new_tokens": size["T"]}
            res["sizes"].append(row)
            try:                                   # an error in one size is recorded and the next size still runs
                row.update(bench_generation(size, prompts, device, repeats))
                row["hf_full_over_rl_notes"] = row["hf_full_s"] / row["rl_notes_s"]
                row["hf_generate_over_rl_notes"] = row["hf_generate_s"] / row["rl_notes_s"]
                ctx.save(res)
                row.update(bench_step(size, device, steps, warmup, tmp, with_trl))
            except Exception as e:
                traceback.print_exc(); row["error"] = f"{type(e).__name__}: {e}"[:500]
            row["wall_s"] = round(time.time() - t0, 1)
            ctx.save(res)
            print(f"{row['name']}: generation {row.get('hf_full_over_rl_notes', float('nan')):.2f}x, step "
                  f"{row.get('trl_over_rl_notes', float('nan')):.2f}x ({row['wall_s']} s) {row.get('error', '')}", flush=True)
    bad = [r["name"] for r in res["sizes"] if "error" in r]
    if bad: raise RuntimeError(f"bench failed at {bad} (the other sizes' results are in 'partial')")
    return res

def part_logprob(ctx, device="cuda", shape=(4, 1024, 151936), dtype="bfloat16", repeats=5):
    "rl_notes' log-prob kernel vs TRL's selective_log_softmax (and a plain log_softmax().gather()) in bf16: time, peak memory, error."
    import torch
    from rl_notes.core import logprobs_from_logits, logprobs_and_entropy
    meths = {"rl_notes": lambda x, y: logprobs_from_logits(x, y), "rl_notes_ent": lambda x, y: logprobs_and_entropy(x, y),
             "naive": lambda x, y: x.log_softmax(-1).gather(-1, y[..., None]).squeeze(-1)}
    if dist_version("trl") is not None:
        from trl.trainer.utils import selective_log_softmax
        meths["trl"] = lambda x, y: selective_log_softmax(x, y)
    cuda = device.startswith("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(shape, device=device, generator=g, dtype=torch.float32).to(getattr(torch, dtype))
    y = torch.randint(0, shape[-1], shape[:-1], device=device, generator=g)
    with torch.no_grad(): ref = x[:1, :64].double().log_softmax(-1).gather(-1, y[:1, :64, None]).squeeze(-1)
    logits_bytes = x.numel() * x.element_size()
    res = {"shape": list(shape), "dtype": dtype, "logits_GiB": logits_bytes / 2**30, "trl": dist_version("trl") or "not installed", "rows": []}
    for name, f in meths.items():
        for backward in (False, True):
            def call():
                xx = x.detach().requires_grad_(backward)
                with torch.set_grad_enabled(backward):
                    out = f(xx, y)
                    if backward: sum(o.float().sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
                return out
            if cuda: torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
            try: out = call(); sync(device)
            except torch.OutOfMemoryError as e:      # recorded; the other methods still run
                res["rows"].append({"method": name, "pass": "fwd+bwd" if backward else "fwd", "error": f"OutOfMemoryError: {e}"[:300]})
                continue
            peak = (torch.cuda.max_memory_allocated() - base) if cuda else None
            lp = out[0] if isinstance(out, tuple) else out
            err = float((lp[:1, :64].detach().double() - ref).abs().max())
            del out, lp
            t, _ = timed(call, device, repeats)
            row = {"method": name, "pass": "fwd+bwd" if backward else "fwd", "ms": 1e3 * t, "max_abs_err": err,
                   "peak_extra_GiB": None if peak is None else peak / 2**30, "peak_extra_x_logits": None if peak is None else peak / logits_bytes}
            res["rows"].append(row); ctx.save(res)
            print(json.dumps(row), flush=True)
    base = {(r["method"], r["pass"]): r["ms"] for r in res["rows"] if "ms" in r}
    ref_m = res["reference"] = "trl" if "trl" in meths else "naive"
    for r in res["rows"]:
        if "ms" in r and (ref_m, r["pass"]) in base: r["ref_over_this"] = base[(ref_m, r["pass"])] / r["ms"]
    return res

A4_TASK = dict(min_digits=1, max_digits=4, scratchpad=True)

def d3_sft(steps:int=1500):
    "The failure-modes notebook's A4_SFT start (tiny Llama, 1-4 digit scratchpad addition), cached in runs/cache; sft_train runs on the CPU."
    from rl_notes.lab import sft_warm_start
    from rl_notes.sft import SFTConfig
    cfg = SFTConfig(steps=steps, lr=3e-3, batch_size=64, n_train=8000, seed=0, target_accuracy=0.4)
    return sft_warm_start("addition", cfg, progress=False, cache_dir=str(REPO / "runs" / "cache"), **A4_TASK)

def prebuild():
    "Train the SFT starts the parts use into runs/cache (CPU, minutes), so that the GPU machine finds them when runs/cache is carried."
    for f in (lambda: char_model(False), lambda: char_model(True), d3_sft):
        t0 = time.time(); print(f(), f"{time.time() - t0:.0f} s", flush=True)

def part_failure_d3(ctx, device="cuda", seeds=(0, 1), steps=15, n_prompts=64, sft_steps=1500, eval_every=5, n_eval=200):
    "D3 of nbs/53_dynamic_sampling.ipynb (GRPO vs GRPO + dynamic sampling on 1-4 digit scratchpad addition), shortened: few seeds and steps."
    import numpy as np
    from rl_notes.trainconfig import TrainConfig, get_algo
    from rl_notes.trainer import train
    t0 = time.time()
    sft = d3_sft(sft_steps)
    res = {"sft_s": round(time.time() - t0, 1), "seeds": list(seeds), "steps": steps, "n_prompts": n_prompts, "runs": {}}
    ctx.save(res)
    arms = {"GRPO": get_algo("grpo", beta=0.0), "GRPO + dynamic sampling": get_algo("grpo", beta=0.0, dynamic_sampling=True, max_rounds=3)}
    acc = {}
    with tempfile.TemporaryDirectory() as tmp:
        for a, algo in arms.items():
            for s in seeds:
                t1 = time.time()
                rows = train(TrainConfig(model=str(sft), algo=algo, task="addition", task_kw=A4_TASK, seed=s, steps=steps, n_prompts=n_prompts,
                                         group_size=8, max_new_tokens=42, lr=3e-4, n_eval=n_eval, eval_every=eval_every, n_train=8000,
                                         out_dir=f"{tmp}/{len(acc)}-{s}", progress=False))
                ev = [r["heldout_acc"] for r in rows if r.get("phase") is None and r.get("heldout_acc") is not None]
                acc.setdefault(a, []).append(ev)
                res["runs"][f"{a} seed {s}"] = {"heldout_acc": ev, "wall_s": round(time.time() - t1, 1)}
                ctx.save(res)
    A, B = arms
    d = np.array([np.mean(b[1:]) - np.mean(a_[1:]) for a_, b in zip(acc[A], acc[B])])
    res["effect"] = float(d.mean()); res["se"] = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else None
    se = f"{res['se']:.3f}" if res["se"] is not None else "n/a"
    res["verdict"] = (f"D3-gpu-short: held-out accuracy, mean over evals after step 0 (DS - GRPO) {res['effect']:+.3f} ± {se} over "
                      f"{len(d)} seeds | 1-4 digit addition, {n_prompts} prompts x 8, {steps} steps, device {device}")
    print(res["verdict"])
    return res

# ---------------------------------------------------------------- the run
@dataclass
class Part:
    name: str
    budget_s: float  # wall seconds of its subprocess (times --scale)
    run: Callable  # run(ctx) -> dict of results (in the subprocess)
    prepare: Callable|None = None  # cheap check in the parent, CUDA or not (raise to fail the part)
    needs_cuda: bool = True
    extra: dict = field(default_factory=dict)

# Budgets (wall seconds; sum 370, about 6 minutes) leave room in a 15-minute device session for starting the machine and
# one rerun of the parts that failed (`--only`).
PARTS = [Part("cuda_tests", 100, part_cuda_tests),
         Part("trainer_smoke", 50, part_trainer_smoke, prepare=trainer_cells),
         Part("bench", 120, part_bench),
         Part("logprob", 90, part_logprob),
         Part("failure_d3", 70, part_failure_d3, prepare=lambda: find_cell("53_dynamic_sampling.ipynb", "D3_ARMS", "sft4g", flag="gpu"))]

def _selftest_parts() -> list[Part]:
    "Parts that check the runner itself on any machine (GPU_CHECK_SELFTEST=1; tests/test_gpu_check.py)."
    def hang(ctx): ctx.save({"started": True}); time.sleep(120)
    def fail(ctx): raise ValueError("broken on purpose")
    def skip(ctx): raise Skip("nothing to do here")
    def bad_prepare(): raise ValueError("cell not found")
    return [Part("selftest_pass", 60, lambda ctx: {"x": 1}, needs_cuda=False), Part("selftest_fail", 60, fail, needs_cuda=False),
            Part("selftest_skip", 60, skip, needs_cuda=False), Part("selftest_timeout", 4, hang, needs_cuda=False),
            Part("selftest_prepare", 60, lambda ctx: {}, prepare=bad_prepare, needs_cuda=False)]

if os.environ.get("GPU_CHECK_SELFTEST"): PARTS += _selftest_parts()

class Ctx:
    "What a part sees in its subprocess: the output dir, its deadline and `save` (partial results survive a timeout)."
    def __init__(self, out:Path, result:Path, budget:float):
        self.out, self.result, self.deadline = out, result, time.time() + budget
    def left(self) -> float: return self.deadline - time.time()
    def save(self, res:dict): self.result.write_text(json.dumps({"partial": res}, default=str))

def child(name:str, out:Path, result:Path, budget:float):
    "Run one part (subprocess side): writes {'status', 'result' | 'error'} to `result`."
    part = next(p for p in PARTS if p.name == name)
    ctx = Ctx(out, result, budget)
    try:
        if part.needs_cuda and not has_cuda(): raise Skip("no CUDA")
        r = {"status": "passed", "result": part.run(ctx)}
    except Skip as e: r = {"status": "skipped", "reason": str(e)}
    except BaseException as e:
        partial = json.loads(result.read_text()).get("partial") if result.exists() else None
        r = {"status": "failed", "reason": f"{type(e).__name__}: {e}"[:500], "traceback": traceback.format_exc()[-4000:], "partial": partial}
    result.write_text(json.dumps(r, default=str))

def run_part(part:Part, out:Path, scale:float, log) -> dict:
    "Prepare in this process, then run in a subprocess under the part's budget; the record for the JSON."
    t0, budget = time.time(), part.budget_s * scale
    rec = {"name": part.name, "budget_s": round(budget, 1)}
    try:
        if part.prepare: part.prepare()
    except Exception as e:
        return {**rec, "status": "failed", "reason": f"preparation: {type(e).__name__}: {e}"[:500], "wall_s": round(time.time() - t0, 1)}
    if part.needs_cuda and not has_cuda():
        return {**rec, "status": "skipped", "reason": "no CUDA", "wall_s": round(time.time() - t0, 1)}
    result = out / f".{part.name}.result.json"; result.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--child", part.name, "--out", str(out), "--result", str(result), "--budget", str(budget)]
    log.write(f"\n===== {part.name} (budget {budget:.0f} s): {' '.join(cmd)}\n"); log.flush()
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    try: p.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9); p.wait()
    r = json.loads(result.read_text()) if result.exists() else {}
    if p.returncode != 0 and r.get("status") not in ("failed", "skipped"):
        timed_out = p.returncode == -9
        r = {"status": "failed", "reason": f"timed out after {budget:.0f} s" if timed_out else f"subprocess exit code {p.returncode}",
             "partial": r.get("partial")}
    result.unlink(missing_ok=True)
    return {**rec, **r, "wall_s": round(time.time() - t0, 1)}

def environment() -> dict:
    env = {"python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
           "versions": {n: dist_version(n) for n in ("torch", "transformers", "tokenizers", "accelerate", "datasets", "trl", "safetensors",
                                                     "huggingface_hub", "numpy", "pytest")}}
    try:
        import torch
        env.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
        if torch.cuda.is_available():
            env.update(device=torch.cuda.get_device_name(), device_memory_GiB=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
    except Exception as e: env["torch_error"] = str(e)
    try: env["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip() or None
    except Exception: env["commit"] = None
    return env

def summary(report:dict) -> str:
    lines = [f"gpu_check: torch {report['env'].get('torch')}, CUDA {'yes: ' + report['env'].get('device', '') if report['env'].get('cuda_available') else 'no'}; "
             f"{report['wall_s']:.0f} s"]
    for r in report["parts"]:
        lines.append(f"  {r['name']:<14} {r['status']:<8} {r['wall_s']:6.1f} s / {r['budget_s']:.0f} s  {r.get('reason', '')}")
    b = next((r for r in report["parts"] if r["name"] == "bench" and r.get("result")), None)
    for s in (b["result"]["sizes"] if b else []):
        if "hf_full_over_rl_notes" in s:
            lines.append(f"    {s['name']}: HF generate+decode+logp / rl_notes {s['hf_full_over_rl_notes']:.2f}x; "
                         f"TRL step / rl_notes {s.get('trl_over_rl_notes', float('nan')):.2f}x")
    lp = next((r for r in report["parts"] if r["name"] == "logprob" and r.get("result")), None)
    for r in (lp["result"]["rows"] if lp else []):
        if r["method"] == "rl_notes" and "ms" in r:
            lines.append(f"    log-prob {r['pass']}: rl_notes {r['ms']:.2f} ms ({lp['result']['reference']} / rl_notes {r.get('ref_over_this', float('nan')):.2f}x), "
                         f"extra peak {'n/a' if r['peak_extra_x_logits'] is None else format(r['peak_extra_x_logits'], '.2f') + 'x'} the logits")
    d3 = next((r for r in report["parts"] if r["name"] == "failure_d3" and r.get("result")), None)
    if d3: lines.append(f"    {d3['result']['verdict']}")
    return "\n".join(lines)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu_check_out", help="output directory (default: $OUT, else ./gpu_check_out)")
    ap.add_argument("--only", default=None, help="comma-separated part names: " + ", ".join(p.name for p in PARTS))
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every part's time budget")
    ap.add_argument("--prebuild", action="store_true", help="only train the SFT starts into runs/cache (CPU; carry runs/cache to the GPU machine)")
    ap.add_argument("--child", help=argparse.SUPPRESS); ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--budget", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    out = Path(a.out).resolve(); out.mkdir(parents=True, exist_ok=True)
    if a.child: return child(a.child, out, Path(a.result), a.budget)
    if a.prebuild: return prebuild()
    names = a.only.split(",") if a.only else [p.name for p in PARTS]
    unknown = set(names) - {p.name for p in PARTS}
    if unknown: ap.error(f"--only: unknown part(s) {sorted(unknown)}; expected some of {[p.name for p in PARTS]}")
    t0 = time.time()
    report = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "env": environment(), "parts": [], "wall_s": 0.0}
    with open(out / "gpu_check.log", "a") as log:
        log.write(f"\n##### gpu_check {report['started']}\n{json.dumps(report['env'])}\n"); log.flush()
        for p in PARTS:
            if p.name not in names: continue
            report["parts"].append(run_part(p, out, a.scale, log))
            report["wall_s"] = round(time.time() - t0, 1)
            (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
        s = summary(report)
        log.write(s + "\n")
    print(s)
    print(f"(JSON: {out / 'gpu_check.json'}; log: {out / 'gpu_check.log'})")
    return 1 if any(r["status"] == "failed" for r in report["parts"]) else 0

if __name__ == "__main__": sys.exit(main())
