"""One GRPO step of `rl_notes.trainer` vs TRL's `GRPOTrainer` on CPU: same tiny model, prompts per step, G, max new tokens.

Prints medians over timed steps (after warm-up steps) of the time per step, the generation time, the rest of the step
(rewards, log-probs, loss, backward, optimizer) and the rollout throughput in generated tokens per second, plus
TRL/ours ratios. Both sides: no KL term (beta 0), one generation and one optimizer step per step, GRPO aggregation.

    python benchmarks/bench_grpo_step.py [--steps 10] [--warmup 3] [--threads 2]
"""
import argparse, os, platform, statistics, subprocess, tempfile, time
import torch

# TRL's GRPOConfig defaults to bf16 autocast and gradient checkpointing; rl_notes' step runs float32 without
# checkpointing, so the TRL side of the comparison does the same arithmetic (a GPU run may pass others in `trl_kw`)
TRL_LIKE_US = dict(bf16=False, gradient_checkpointing=False)

def cpu_name():
    try: return [l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines() if l.startswith("Model name")][0]
    except Exception: return platform.processor() or platform.machine()

def ours(model_dir, task_kw, a, tmp):
    from rl_notes.trainconfig import TrainConfig, get_algo
    from rl_notes.trainer import train
    rows = train(TrainConfig(model=model_dir, algo=get_algo("grpo", beta=0.0), task_kw=task_kw, steps=a.warmup + a.steps,
                             n_prompts=a.n_prompts, group_size=a.G, max_new_tokens=a.max_new_tokens, lr=1e-4, n_eval=0,
                             n_train=2000, out_dir=os.path.join(tmp, "ours"), progress=False, seed=0,
                             # micro-batches of `trim` rows, length-sorted and cut to their longest response (the default with micro-batches)
                             **(dict(micro_batch_size=a.trim) if getattr(a, "trim", None) else {}),
                             # the speed levers are on by default; `compact` / `share` False turn them off (the path before they were)
                             **{k: bool(v) for k, v in (("compact_generation", getattr(a, "compact", None)), ("share_prompt", getattr(a, "share", None))) if v is not None}))
    rows = [r for r in rows if r["step"] > a.warmup]
    B = a.n_prompts * a.G
    return dict(step=[r["time_step"] for r in rows], gen=[r["time_gen"] for r in rows],
                rest=[r["time_step"] - r["time_gen"] for r in rows], tokps=[r["resp_len"] * B / r["time_gen"] for r in rows])

def trl(model_dir, task, a, tmp):
    from transformers import TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer
    from rl_notes.models import load_model
    hf_logging.set_verbosity_error()
    model, tok = load_model(model_dir)
    ds = task.dataset(a.n_prompts * (a.warmup + a.steps), seed=0, split="train").select_columns(["prompt", "answer"])
    def correct(prompts, completions, answer, **kw): return [task.verify({"answer": x}, c)[0] for c, x in zip(completions, answer)]
    gen_t = []
    orig = model.generate
    def timed_generate(*args, **kw):
        t0 = time.perf_counter(); out = orig(*args, **kw); gen_t.append(time.perf_counter() - t0); return out
    model.generate = timed_generate
    class Clock(TrainerCallback):
        def __init__(self): self.t, self.steps, self.logs = None, [], []
        def on_step_begin(self, args, state, control, **kw): self.t = time.perf_counter()
        def on_step_end(self, args, state, control, **kw): self.steps.append(time.perf_counter() - self.t)
        def on_log(self, args, state, control, logs=None, **kw): self.logs.append(dict(logs or {}))
    clock = Clock()
    cfg = GRPOConfig(output_dir=os.path.join(tmp, "trl"), per_device_train_batch_size=a.n_prompts * a.G, num_generations=a.G,
                     max_completion_length=a.max_new_tokens, learning_rate=1e-4, beta=0.0, loss_type="grpo", temperature=1.0,
                     max_steps=a.warmup + a.steps, logging_steps=1, report_to="none", use_cpu=getattr(a, "use_cpu", True), save_strategy="no",
                     shuffle_dataset=False, seed=0, disable_tqdm=True, dataloader_num_workers=0,
                     **{**TRL_LIKE_US, **getattr(a, "trl_kw", {})})
    tr = GRPOTrainer(model=model, reward_funcs=correct, args=cfg, train_dataset=ds, processing_class=tok, callbacks=[clock])
    tr.train()
    lens = [l["completions/mean_length"] for l in clock.logs if "completions/mean_length" in l]
    n = min(len(clock.steps), len(gen_t), len(lens))
    steps, gens, lens = clock.steps[:n][a.warmup:], gen_t[:n][a.warmup:], lens[:n][a.warmup:]
    B = a.n_prompts * a.G
    return dict(step=steps, gen=gens, rest=[s - g for s, g in zip(steps, gens)], tokps=[l * B / g for l, g in zip(lens, gens)])

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10); p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--n-prompts", type=int, default=16); p.add_argument("--G", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=6); p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sft-steps", type=int, default=300, help="SFT steps of the shared starting model (cached)")
    p.add_argument("--stat", default="median", choices=("median", "min"), help="median, or min (best case; robust on a busy machine)")
    p.add_argument("--model", default=None, help="use this checkpoint instead of the cached SFT model")
    p.add_argument("--trim", type=int, default=None, help="rl_notes side: micro-batches of this many rows, sorted by length and trimmed (trim_micro_batches, on by default)")
    p.add_argument("--levers-off", action="store_true", help="rl_notes side: without the default speed levers (compact_generation and share_prompt False)")
    a = p.parse_args()
    a.compact = a.share = (False if a.levers_off else None)
    torch.set_num_threads(a.threads)
    from rl_notes.lab import sft_warm_start, SFTConfig
    from rl_notes.tasks import get_task
    task_kw = dict(max_digits=2, scratchpad=False)
    task = get_task("addition", **task_kw)
    model_dir = a.model or str(sft_warm_start(task, SFTConfig(steps=a.sft_steps, n_train=8000, eval_n=0), progress=False, cache_dir="runs/cache"))
    with tempfile.TemporaryDirectory() as tmp:
        res = {"rl_notes": ours(model_dir, task_kw, a, tmp), "TRL GRPOTrainer": trl(model_dir, task, a, tmp)}
    stat = min if a.stat == "min" else statistics.median
    med = {k: {m: (max if m == "tokps" and a.stat == "min" else stat)(v[m]) for m in ("step", "gen", "rest", "tokps")} for k, v in res.items()}
    print(f"CPU: {cpu_name()}; torch {torch.__version__}; threads {a.threads}; {a.n_prompts} prompts x G={a.G}, "
          f"max_new_tokens={a.max_new_tokens}; {a.stat} of {a.steps} steps after {a.warmup} warm-up")
    print("| implementation | step (ms) | generation (ms) | rest of step (ms) | rollout tokens/s |")
    print("|---|---|---|---|---|")
    for k, m in med.items():
        print(f"| {k} | {1e3 * m['step']:.1f} | {1e3 * m['gen']:.1f} | {1e3 * m['rest']:.1f} | {m['tokps']:.0f} |")
    o, t = med["rl_notes"], med["TRL GRPOTrainer"]
    print(f"| ratio TRL / rl_notes (time; >1 = rl_notes faster) | {t['step'] / o['step']:.2f}x | {t['gen'] / o['gen']:.2f}x | "
          f"{t['rest'] / o['rest']:.2f}x | {o['tokps'] / t['tokps']:.2f}x (tokens/s, ours/TRL) |")

if __name__ == "__main__": main()
