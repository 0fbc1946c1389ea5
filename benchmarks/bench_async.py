"""Asynchronous generation (`TrainConfig(async_generation=True, sampler_lag=k)`: the next batch is sampled in a thread while
this step learns) against the synchronous loop with the same lag, which computes the same run.

Arms, per size and repeat, in one process, interleaved: the synchronous loop with `sampler_lag=k` on one torch thread
(what one lab worker does), the same on two torch threads (both cores on each operation), the asynchronous loop on one
torch thread per Python thread (the sampler's and the learner's: both cores, one for each), and the on-policy
synchronous loop (`sampler_lag=0`, one thread) for scale. Sizes: the character Llama of bench_real.py at 6 and at 42 new
tokens (16 prompts x 8, GRPO, beta 0: one optimizer step per batch), and D1's shape (countdown, 64 prompts x 8, 64
optimizer steps per batch), where the update is most of the step. The time of a step is its wall time (`time_step`, from
its start to its row; in the asynchronous loop that includes waiting for the batch sampled ahead); each arm's figure is
the median over its steps after --warmup, then the median over repeats; ratios are of those medians (> 1: the
asynchronous loop is faster), measured in the same run.

    python benchmarks/bench_async.py [--lag 1] [--steps 8] [--warmup 2] [--repeats 3] [--sizes char6,char42,d1]
"""
import argparse, os, statistics, sys, tempfile
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def size_cfg(name:str) -> dict:
    "The model, task and batch of a size (the SFT start is made and cached before any clock starts)."
    from rl_notes.trainconfig import get_algo
    if name in ("char6", "char42"):
        from bench_real import char_model
        d, kw = char_model(scratchpad=name == "char42")
        return dict(model=d, task_kw=kw, n_prompts=16, group_size=8, max_new_tokens=6 if name == "char6" else 42, lr=1e-4,
                    algo=get_algo("grpo", beta=0.0), n_train=2000)
    if name == "d1":   # 51_clip_higher / 57_estimators' shape: countdown, 64 prompts x 8, 4 epochs x 16 minibatches
        from rl_notes.lab import sft_warm_start
        from rl_notes.sft import SFTConfig
        task_kw = dict(n_numbers=4, max_number=9, max_target=99)
        start = sft_warm_start("countdown", SFTConfig(steps=3000, n_train=20000, seed=0, target_accuracy=0.25), progress=False, **task_kw)
        return dict(model=str(start), task="countdown", task_kw=task_kw, n_prompts=64, group_size=8, max_new_tokens=12, lr=3e-4,
                    ppo_epochs=4, n_minibatches=16, algo=get_algo("grpo", beta=0.0), n_train=20000)
    raise ValueError(f"--sizes: unknown size {name!r} (char6, char42, d1)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lag", type=int, default=1); ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2); ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="char6,char42,d1")
    a = ap.parse_args(argv)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    from rl_notes.trainconfig import TrainConfig
    from rl_notes.trainer import train
    from bench_real import cpu_name
    arms = {f"sync, lag {a.lag}, 1 thread": dict(sampler_lag=a.lag, threads=1),
            f"sync, lag {a.lag}, 2 threads": dict(sampler_lag=a.lag, threads=2),
            f"async, lag {a.lag}, 1 thread each": dict(sampler_lag=a.lag, threads=1, async_generation=True),
            "sync, on-policy, 1 thread": dict(sampler_lag=0, threads=1)}
    base_arm, async_arm = list(arms)[0], list(arms)[2]
    print(f"Hardware: {cpu_name()} ({os.cpu_count()} cores); torch {torch.__version__}; {a.steps} steps per run, the first "
          f"{a.warmup} not timed; median over steps, then over {a.repeats} repeats", flush=True)
    for size in a.sizes.split(","):
        kw = size_cfg(size)
        med = {k: [] for k in arms}
        for r in range(a.repeats):
            for name, extra in arms.items():
                with tempfile.TemporaryDirectory() as tmp:
                    rows = train(TrainConfig(out_dir=tmp, steps=a.steps, n_eval=0, progress=False, seed=r, **kw, **extra))
                med[name].append(statistics.median(x["time_step"] for x in rows if x["step"] > a.warmup))
            print(f"{size}, run {r}: " + "; ".join(f"{k} {1e3 * v[-1]:.0f} ms" for k, v in med.items()), flush=True)
        m = {k: statistics.median(v) for k, v in med.items()}
        print(f"RESULT asynchronous generation vs the synchronous loop with the same lag ({a.lag}), {size}, {kw['n_prompts']} prompts x "
              f"{kw['group_size']} | step {1e3 * m[async_arm]:.0f} ms vs {1e3 * m[base_arm]:.0f} ms on one thread: "
              f"{m[base_arm] / m[async_arm]:.2f}x; vs two threads {m[list(arms)[1]] / m[async_arm]:.2f}x; "
              f"vs on-policy sync {m[list(arms)[3]] / m[async_arm]:.2f}x ({a.repeats} repeats, per-repeat async/sync-1-thread "
              + ", ".join(f"{b / s:.2f}x" for b, s in zip(med[base_arm], med[async_arm])) + ")", flush=True)


if __name__ == "__main__":
    main()
