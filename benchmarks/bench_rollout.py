"""Rollout speed on CPU: rl_notes.rollout.generate (hand-written KV-cache loop that records old_logp as it samples)
vs Hugging Face `model.generate(do_sample=True)` followed by the forward pass that a trainer then needs for old_logp.

Usage: python benchmarks/bench_rollout.py [--threads 1] [--repeats 5] [--model PATH]
Times are process CPU time (the machine is shared, so wall time is noisy); prints medians of interleaved repeats and ratios against the HF baseline measured in the same run."""
import argparse, platform, statistics, subprocess, time
import torch
from rl_notes.models import build_tokenizer, tiny_llama, load_model
from rl_notes.rollout import generate, response_logprobs
from rl_notes.tasks import get_task

def cpu_name():
    try: return next(l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines() if l.startswith("Model name"))
    except Exception: return platform.processor() or "unknown CPU"

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1); ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--model", default=None, help="checkpoint dir (default: a fresh tiny Llama, d=96, 2 layers)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.model: model, tok = load_model(a.model)
    else: tok = build_tokenizer(); model = tiny_llama(tok)
    model.eval()
    task = get_task("addition", min_digits=1, max_digits=4)
    prompts = list(task.dataset(16, seed=0)["prompt"])
    print(f"CPU: {cpu_name()} | torch {torch.__version__} | threads {a.threads} | "
          f"{sum(p.numel() for p in model.parameters())/1e6:.2f}M params | 16 prompts x G=8")
    print("| max_new_tokens | method | median CPU s | response tokens/s | ratio vs HF generate + logp pass |")
    print("|---|---|---|---|---|")
    for T in (8, 40):
        def ours(cache="dynamic"):
            ro = generate(model, tok, prompts, 8, T, temperature=1.0, seed=0, cache=cache)
            return int(ro.response_mask.sum())
        def hf(with_logp=True):
            enc = tok(prompts, padding=True, return_tensors="pt")
            ids, att = enc["input_ids"].repeat_interleave(8, 0), enc["attention_mask"].repeat_interleave(8, 0)
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=att, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                     max_new_tokens=T, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
                resp = out[:, ids.shape[1]:]
                is_eos = resp == tok.eos_token_id
                rmask = ((is_eos.long().cumsum(-1) - is_eos.long()) == 0).long()   # up to and including the first EOS
                if with_logp:
                    from rl_notes.rollout import Rollout
                    ro = Rollout(out, torch.cat([att, rmask], 1), rmask, torch.zeros(rmask.shape), ~is_eos.any(-1), [], ids.shape[1], 8)
                    response_logprobs(model, ro)
            return int(rmask.sum())
        meths = {"rl_notes.generate, dynamic cache (default)": ours,
                 "rl_notes.generate, static cache": lambda: ours("static"), "HF generate + logp forward": hf,
                 "HF generate only": lambda: hf(False)}
        times = {k: [] for k in meths}; toks = {}
        for f in meths.values(): f()                                    # warm-up
        for _ in range(a.repeats):
            for k, f in meths.items():
                t0 = time.process_time(); toks[k] = f(); times[k].append(time.process_time() - t0)
        base = statistics.median(times["HF generate + logp forward"])
        for k in meths:
            med = statistics.median(times[k])
            print(f"| {T} | {k} | {med:.3f} | {toks[k]/med:,.0f} | {base/med:.2f}x |")

if __name__ == "__main__": main()
