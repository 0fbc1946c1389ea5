"""rl_notes against Hugging Face / TRL at three sizes, ratios measured in the same run, printed as one markdown table.

Sizes: the character-level tiny Llama (SFT warm start on addition) at 6 and at 42 new tokens, and a ~20M-parameter random
Qwen2 with a 32k byte-level BPE vocabulary and a chat template at 64 new tokens (conversational prompts).

- generation: `rl_notes.rollout.generate` (tokenise, sample with the KV cache, old_logp recorded while sampling, decode)
  against what a trainer does with `transformers`: tokenise, `model.generate(do_sample=True)`, decode, and the forward
  pass for old_logp (`model.generate` alone is shown too). Process CPU time, median of interleaved repeats.
- GRPO step: one step of `rl_notes.trainer.train` against one step of TRL's `GRPOTrainer` (benchmarks/bench_grpo_step.py:
  same model, prompts, G, max new tokens, beta 0, one generation and one optimizer step per step). Median wall time.
- LoRA: peak resident memory (VmHWM of a fresh process) of two GRPO steps with a KL term (beta > 0) on the Qwen2, full
  fine-tuning (the reference is a frozen copy of the weights) vs LoRA (the reference is the base with adapters off), and the
  bytes of weights each holds (policy + reference + adapters).

    python benchmarks/bench_real.py [--threads 1] [--repeats 5] [--steps 3] [--warmup 1]
"""
import argparse, contextlib, json, os, platform, statistics, subprocess, sys, tempfile, time
from types import SimpleNamespace
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

def cpu_name():
    try: return next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except Exception: return platform.processor() or platform.machine()

def char_model(scratchpad:bool):
    "The cached SFT warm start of the character tiny Llama on 1-2 digit addition (trained once, ~20 s)."
    from rl_notes.lab import sft_warm_start, SFTConfig
    from rl_notes.tasks import get_task
    kw = dict(max_digits=2, scratchpad=scratchpad)
    return str(sft_warm_start(get_task("addition", **kw), SFTConfig(steps=300, n_train=8000, eval_n=0), progress=False, cache_dir="runs/cache")), kw

def qwen_model(root):
    from rl_notes.models import save_tiny_chat_model
    p = os.path.join(root, "qwen2-20m")
    if not os.path.exists(os.path.join(p, "model.safetensors")):
        save_tiny_chat_model(p, vocab_size=32000, hidden_size=256, num_layers=4, seed=0)
    return p

# ---------------------------------------------------------------- generation
def bench_generation(model_dir, prompts, G, T, repeats):
    from rl_notes.models import load_model
    from rl_notes.rollout import generate, response_logprobs, Rollout, _eos_ids, _pad_id
    from rl_notes.data import render_prompts
    from transformers import GenerationConfig
    model, tok = load_model(model_dir); model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    eos = _eos_ids(model, tok); pad = _pad_id(tok, eos)
    gc = GenerationConfig(max_new_tokens=T, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad,
                          eos_token_id=eos, disable_compile=True)
    def ours(): return int(generate(model, tok, prompts, G, T, seed=0).response_mask.sum())
    def hf(with_rest=True):
        texts, special = render_prompts(tok, prompts)                 # what a trainer does around model.generate
        enc = tok(texts, padding=True, padding_side="left", add_special_tokens=special, return_tensors="pt")
        ids, att = enc["input_ids"].repeat_interleave(G, 0), enc["attention_mask"].repeat_interleave(G, 0)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=att, generation_config=gc)
            resp = out[:, ids.shape[1]:]
            is_eos = torch.isin(resp, torch.tensor(eos))
            rmask = ((is_eos.long().cumsum(-1) - is_eos.long()) == 0).long()   # up to and including the first EOS
            if with_rest:
                tok.batch_decode(resp.masked_fill(~rmask.bool(), pad), skip_special_tokens=True)
                ro = Rollout(out, torch.cat([att, rmask], 1), rmask, torch.zeros(rmask.shape), ~is_eos.any(-1), [], ids.shape[1], G)
                response_logprobs(model, ro)
        return int(rmask.sum())
    meths = {"rl_notes generate": ours, "HF generate + decode + logp pass": hf, "HF model.generate alone": lambda: hf(False)}
    times = {k: [] for k in meths}; toks = {}
    for f in meths.values(): f()                                       # warm-up
    for _ in range(repeats):
        for k, f in meths.items():
            t0 = time.process_time(); toks[k] = f(); times[k].append(time.process_time() - t0)
    return {k: (statistics.median(v), toks[k]) for k, v in times.items()}, n_params

# ---------------------------------------------------------------- GRPO step
def bench_step(model_dir, task_kw, n_prompts, G, T, steps, warmup, threads, tmp, trim=None, levers_off=False):
    import bench_grpo_step as bg
    from rl_notes.tasks import get_task
    a = SimpleNamespace(steps=steps, warmup=warmup, n_prompts=n_prompts, G=G, max_new_tokens=T, threads=threads, trim=trim,
                        compact=False if levers_off else None, share=False if levers_off else None)
    tmp = tempfile.mkdtemp(dir=tmp)
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):   # TRL prints its logs
        res = {"rl_notes": bg.ours(model_dir, task_kw, a, tmp), "TRL": bg.trl(model_dir, get_task("addition", **task_kw), a, tmp)}
    return {k: statistics.median(v["step"]) for k, v in res.items()}

# ---------------------------------------------------------------- LoRA memory (one fresh process per setting)
def _lora_child(model_dir, lora_r, out_dir):
    from rl_notes.trainconfig import TrainConfig, get_algo
    from rl_notes.trainer import train
    torch.set_num_threads(1)
    train(TrainConfig(model=model_dir, algo=get_algo("grpo", beta=0.04), task_kw=dict(max_digits=2, scratchpad=False), steps=2,
                      n_prompts=2, group_size=4, max_new_tokens=16, lr=1e-4, n_eval=0, n_train=200, out_dir=out_dir,
                      progress=False, seed=0, lora_r=lora_r))
    # VmHWM (the peak resident set of this process image); ru_maxrss would keep the forking parent's peak across exec
    hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
    print(json.dumps({"peak_rss": hwm}))

def weight_bytes(model_dir, lora_r):
    "Bytes of weights a beta > 0 run holds: policy + reference copy (full) or policy + adapters (LoRA, reference = adapters off)."
    from rl_notes.models import load_model, apply_lora
    model, _ = load_model(model_dir)
    base = sum(p.numel() * p.element_size() for p in model.parameters())
    if not lora_r: return 2 * base
    lm = apply_lora(model, r=lora_r)
    return sum(p.numel() * p.element_size() for p in lm.parameters())

def bench_lora(model_dir, tmp):
    out = {}
    for r in (0, 16):
        cmd = [sys.executable, __file__, "--lora-child", model_dir, str(r), os.path.join(tmp, f"lora{r}")]
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if p.returncode: print(p.stderr[-3000:], file=sys.stderr); raise SystemExit("LoRA memory run failed")
        out[r] = (json.loads(p.stdout.strip().splitlines()[-1])["peak_rss"], weight_bytes(model_dir, r))
    return out

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1); ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3); ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--skip-step", action="store_true", help="generation and memory only")
    ap.add_argument("--trim", type=int, default=None, help="rl_notes' GRPO step in micro-batches of this many rows, sorted by length and trimmed (trim_micro_batches)")
    ap.add_argument("--levers-off", action="store_true", help="rl_notes' GRPO step without its default speed levers (compact_generation and share_prompt False)")
    ap.add_argument("--lora-child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.lora_child: return _lora_child(a.lora_child[0], int(a.lora_child[1]), a.lora_child[2])
    torch.set_num_threads(a.threads)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error(); hf_logging.disable_progress_bar()
    from rl_notes.tasks import get_task
    import transformers, trl
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        char6, kw6 = char_model(scratchpad=False)
        char42, kw42 = char_model(scratchpad=True)
        qwen = qwen_model(tmp)
        sizes = [  # name, model dir, task options, prompts per step, G, new tokens, conversational generation prompts
            ("char Llama, 6 new tokens", char6, kw6, 16, 8, 6, False),
            ("char Llama, 42 new tokens (scratchpad)", char42, kw42, 16, 8, 42, False),
            ("random Qwen2, V=32000, 64 new tokens", qwen, kw6, 4, 4, 64, True),
        ]
        rows = []
        for name, d, kw, n, G, T, chat in sizes:
            prompts = list(get_task("addition", **kw).dataset(n, seed=0)["prompt"])
            if chat: prompts = [[{"role": "user", "content": f"What is {p[:-1]}?"}] for p in prompts]
            gen, n_params = bench_generation(d, prompts, G, T, a.repeats)
            step = None if a.skip_step else bench_step(d, kw, n, G, T, a.steps, a.warmup, a.threads, tmp, a.trim, a.levers_off)
            rows.append((f"{name} ({n_params / 1e6:.2f}M params)", n, G, T, gen, step))
            print(f"# done: {name} ({time.time() - t_start:.0f} s)", file=sys.stderr, flush=True)
        lora = bench_lora(qwen, tmp)
    print(f"Hardware: {cpu_name()} ({os.cpu_count()} cores); torch {torch.__version__}, transformers {transformers.__version__}, "
          f"TRL {trl.__version__}; {a.threads} thread(s). Generation: median process CPU time of {a.repeats} interleaved repeats; "
          f"GRPO step: median wall time of {a.steps} steps after {a.warmup} warm-up" + (f", rl_notes in trimmed micro-batches of {a.trim}" if a.trim else "") + (", rl_notes with its speed levers off" if a.levers_off else ", rl_notes with its default speed levers (compacted generation, the shared prompt pass)") + ". Ratio = their time / rl_notes' time (>1: rl_notes faster).")
    print()
    print("| size | prompts x G | rl_notes generate (ms) | HF generate + decode + logp pass (ms) | ratio | HF model.generate alone (ms) | ratio | rl_notes GRPO step (ms) | TRL GRPOTrainer step (ms) | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, n, G, T, gen, step in rows:
        o, h, g = gen["rl_notes generate"][0], gen["HF generate + decode + logp pass"][0], gen["HF model.generate alone"][0]
        st = "| - | - | - |" if step is None else f"| {1e3 * step['rl_notes']:.0f} | {1e3 * step['TRL']:.0f} | {step['TRL'] / step['rl_notes']:.2f}x |"
        print(f"| {name} | {n} x {G} | {1e3 * o:.1f} | {1e3 * h:.1f} | {h / o:.2f}x | {1e3 * g:.1f} | {g / o:.2f}x " + st)
    print()
    print("| Qwen2, GRPO with a KL term (beta 0.04), 2 steps | weights held: policy + reference (+ adapters) | peak RSS of the process |")
    print("|---|---|---|")
    for r, label in ((0, "full fine-tuning (reference = frozen copy)"), (16, "LoRA r=16 (reference = adapters off)")):
        rss, wb = lora[r]
        print(f"| {label} | {wb / 2**20:.1f} MiB | {rss / 2**20:.0f} MiB |")
    print(f"\n(total benchmark time {time.time() - t_start:.0f} s)")
    # one line per claim, collected into the results page (nbs/results.ipynb)
    ratio = lambda f: ", ".join(f"{f(gen, step):.2f}x" for _, _, _, _, gen, step in rows)
    sizes = "char Llama at 6 / 42 new tokens, random Qwen2 (V=32000) at 64"
    print(f"RESULT rl_notes `generate` vs `model.generate` + decode + log-prob pass ({sizes}) | "
          f"{ratio(lambda g, s: g['HF generate + decode + logp pass'][0] / g['rl_notes generate'][0])} faster "
          f"({ratio(lambda g, s: g['HF model.generate alone'][0] / g['rl_notes generate'][0])} vs `model.generate` alone)")
    if all(step is not None for *_, step in rows):
        print(f"RESULT one GRPO step of `rl_notes.trainer` vs TRL's `GRPOTrainer` ({sizes}) | {ratio(lambda g, s: s['TRL'] / s['rl_notes'])} faster")
    (rss0, wb0), (rss16, wb16) = lora[0], lora[16]
    print(f"RESULT LoRA r=16 vs full fine-tuning, GRPO with a KL term on the Qwen2 | weights held {wb16 / 2**20:.1f} vs {wb0 / 2**20:.1f} MiB "
          f"(the reference is the base with adapters off), peak RSS {rss16 / 2**20:.0f} vs {rss0 / 2**20:.0f} MiB")

if __name__ == "__main__": main()
