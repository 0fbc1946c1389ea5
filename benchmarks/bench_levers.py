"""The GRPO step's speed levers against TRL's GRPOTrainer, at the three sizes of bench_real.py.

Per size and repeat, in one process: rl_notes' step with the levers off (the path before they were the default), with
compacted generation only (`compact_generation`: finished rows leave the sampler's batch), with the shared prompt only
(`share_prompt`: each prompt prefilled once for its group, and once in the log-prob pass), with the defaults (both), with
the defaults in sorted, trimmed micro-batches (`micro_batch_size`, `trim_micro_batches`), and TRL's step
(bench_grpo_step.py's set-up: same model, 16 prompts x 8, beta 0). At the third size, the ~20M-parameter random Qwen2
with a 32k vocabulary at 64 new tokens (4 prompts x 4), every arm but the micro-batches. Prints the median step and
generation time of each and the ratio TRL / rl_notes (> 1: rl_notes faster). The levers compute the same step up to
float order.

    python benchmarks/bench_levers.py [--repeats 5] [--trim 32] [--steps 5] [--warmup 2] [--sizes 6,42,qwen]
"""
import argparse, contextlib, os, statistics, sys, tempfile
from types import SimpleNamespace
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5); ap.add_argument("--trim", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5); ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--sizes", default="6,42,qwen", help="6 and 42: the character Llama at that many new tokens; qwen: the random Qwen2 at 64")
    a = ap.parse_args()
    torch.set_num_threads(1)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    import bench_grpo_step as bg
    from bench_real import char_model, qwen_model, cpu_name
    from rl_notes.tasks import get_task
    arms = {"levers off": dict(compact=False, share=False), "compact only": dict(compact=True, share=False),
            "shared prompt only": dict(compact=False, share=True), "default (compact + shared prompt)": {},
            f"default, micro-batches of {a.trim} trimmed": dict(trim=a.trim), "TRL": None}
    ratios = {}                                                     # (T, arm) -> TRL / rl_notes per run
    qwen_dir = tempfile.mkdtemp()
    sizes = {"6": lambda: (*char_model(scratchpad=False), 6, 16, 8, arms), "42": lambda: (*char_model(scratchpad=True), 42, 16, 8, arms),
             "qwen": lambda: (qwen_model(qwen_dir), char_model(scratchpad=False)[1], 64, 4, 4,
                              {k: v for k, v in arms.items() if not k.startswith("default, micro")})}
    for size in a.sizes.split(","):
        if size not in sizes: raise SystemExit(f"--sizes: unknown size {size!r} (6, 42, qwen)")
        d, kw, T, n_prompts, G, size_arms = sizes[size]()
        for r in range(a.repeats):
            res = {}
            with tempfile.TemporaryDirectory() as tmp:
                for name, extra in size_arms.items():
                    ns = SimpleNamespace(steps=a.steps, warmup=a.warmup, n_prompts=n_prompts, G=G, max_new_tokens=T, threads=1, **(extra or {}))
                    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):   # TRL prints its logs
                        out = (bg.trl(d, get_task("addition", **kw), ns, tempfile.mkdtemp(dir=tmp)) if extra is None
                               else bg.ours(d, kw, ns, tempfile.mkdtemp(dir=tmp)))
                    res[name] = (statistics.median(out["step"]), statistics.median(out["gen"]))
            for k in res:
                if k != "TRL": ratios.setdefault((size, k), []).append(res["TRL"][0] / res[k][0])
            print(f"{'Qwen2, ' if size == 'qwen' else ''}{T} new tokens, run {r}: " + "; ".join(f"{k} {1e3 * s:.0f} ms (generation {1e3 * g:.0f})" for k, (s, g) in res.items())
                  + " | TRL / rl_notes: " + ", ".join(f"{k} {res['TRL'][0] / res[k][0]:.2f}x" for k in res if k != "TRL"), flush=True)
    import transformers, trl
    print(f"Hardware: {cpu_name()} ({os.cpu_count()} cores); torch {torch.__version__}, transformers {transformers.__version__}, TRL {trl.__version__}; "
          f"1 thread; median of {a.steps} steps after {a.warmup} warm-up, {a.repeats} runs per size")
    for size in a.sizes.split(","):
        what = "random Qwen2 (V=32000) at 64 new tokens, 4 prompts x 4" if size == "qwen" else f"char Llama at {size} new tokens"
        print(f"RESULT one GRPO step with the speed levers vs TRL's `GRPOTrainer`, {what} ({a.repeats} runs) | "
              + "; ".join(f"{k} {min(v):.2f}x-{max(v):.2f}x ({sum(x >= 1.5 for x in v)}/{len(v)} >= 1.5x)" for (t, k), v in ratios.items() if t == size))

if __name__ == "__main__":
    main()
