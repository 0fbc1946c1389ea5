"""The GRPO step's speed levers against TRL's GRPOTrainer, at the two character-model sizes of bench_real.py.

Per size and repeat, in one process: rl_notes' step with the levers off (the path before they were the default), with
compacted generation only (`compact_generation`: finished rows leave the sampler's batch), with the defaults (compaction
and the shared prompt, `share_prompt`: each distinct prompt once in the log-prob pass), with the defaults in sorted,
trimmed micro-batches (`micro_batch_size`, `trim_micro_batches`), and TRL's step (bench_grpo_step.py's set-up: same
model, 16 prompts x 8, beta 0). Prints the median step and generation time of each and the ratio TRL / rl_notes (> 1:
rl_notes faster). The levers compute the same step up to float order.

    python benchmarks/bench_levers.py [--repeats 5] [--trim 32] [--steps 5] [--warmup 2]
"""
import argparse, contextlib, os, statistics, sys, tempfile
from types import SimpleNamespace
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5); ap.add_argument("--trim", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5); ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    import bench_grpo_step as bg
    from bench_real import char_model, cpu_name
    from rl_notes.tasks import get_task
    arms = {"levers off": dict(compact=False, share=False), "compact only": dict(compact=True, share=False),
            "default (compact + shared prompt)": {}, f"default, micro-batches of {a.trim} trimmed": dict(trim=a.trim), "TRL": None}
    ratios = {}                                                     # (T, arm) -> TRL / rl_notes per run
    for scratchpad, T in ((False, 6), (True, 42)):
        d, kw = char_model(scratchpad=scratchpad)
        for r in range(a.repeats):
            res = {}
            with tempfile.TemporaryDirectory() as tmp:
                for name, extra in arms.items():
                    ns = SimpleNamespace(steps=a.steps, warmup=a.warmup, n_prompts=16, G=8, max_new_tokens=T, threads=1, **(extra or {}))
                    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):   # TRL prints its logs
                        out = (bg.trl(d, get_task("addition", **kw), ns, tempfile.mkdtemp(dir=tmp)) if extra is None
                               else bg.ours(d, kw, ns, tempfile.mkdtemp(dir=tmp)))
                    res[name] = (statistics.median(out["step"]), statistics.median(out["gen"]))
            for k in res:
                if k != "TRL": ratios.setdefault((T, k), []).append(res["TRL"][0] / res[k][0])
            print(f"{T} new tokens, run {r}: " + "; ".join(f"{k} {1e3 * s:.0f} ms (generation {1e3 * g:.0f})" for k, (s, g) in res.items())
                  + " | TRL / rl_notes: " + ", ".join(f"{k} {res['TRL'][0] / res[k][0]:.2f}x" for k in res if k != "TRL"), flush=True)
    import transformers, trl
    print(f"Hardware: {cpu_name()} ({os.cpu_count()} cores); torch {torch.__version__}, transformers {transformers.__version__}, TRL {trl.__version__}; "
          f"1 thread; median of {a.steps} steps after {a.warmup} warm-up, {a.repeats} runs per size")
    for T in (6, 42):
        print(f"RESULT one GRPO step with the speed levers vs TRL's `GRPOTrainer`, char Llama at {T} new tokens ({a.repeats} runs) | "
              + "; ".join(f"{k} {min(v):.2f}x-{max(v):.2f}x ({sum(x >= 1.5 for x in v)}/{len(v)} >= 1.5x)" for (t, k), v in ratios.items() if t == T))

if __name__ == "__main__":
    main()
