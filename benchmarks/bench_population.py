"""Runs per core-hour of the population path (`rl_notes.population.train_population`: P runs of one design as one
batched program, one thread) against one run per process (`train`, one thread: what each `lab_runs` worker does), for
the lab designs D3 (addition, 16 prompts x 8, one optimizer step per batch), D1 (countdown, 64 prompts x 8, 64
optimizer steps per batch) and V1-long (PPO with a critic, 16 prompts x 8, up to 192 new tokens; the critic made from
the policy, as the design's reward-model initialisation changes its weights, not its shape or its cost), and the
fingerprint's micro runs (a width-32 model, 4 prompts x 4: where per-call overhead,
not the tensors, sets a run's time). Each measurement trains every run from its SFT start for the design's steps (the step-0
and the last held-out evaluation included; the start is made before the clock starts) in this process; the clock is this process's CPU time (`time.process_time`), so
another job on a shared machine does not inflate either side; ratios are of medians over --repeats, measured in the
same run. A population's members are seeds 0..P-1 of the design (the single run: seed 0).

Usage: python benchmarks/bench_population.py [--designs D3:4,D1:2,V1-long:2,micro:20] [--sizes 4,8,16] [--repeats 3]   (design:steps)
"""
import argparse, platform, statistics, tempfile, time
from pathlib import Path
import torch


def configs(design:str, P:int, steps:int, root:Path) -> list:
    from rl_notes.lab import designs, sft_warm_start
    from rl_notes.sft import SFTConfig
    from rl_notes.trainconfig import TrainConfig, get_algo
    if design == "D3":
        d = designs["D3"]; start = d.start()
        base = {**d.base, "steps": steps, "eval_every": steps}
        algo, task, task_kw = d.algo("GRPO"), d.task, d.task_kw
    elif design == "D1":   # 51_clip_higher / 57_estimators: countdown, 64 optimizer steps per batch, GRPO eps 0.2
        task, task_kw = "countdown", dict(n_numbers=4, max_number=9, max_target=99)
        start = sft_warm_start(task, SFTConfig(steps=3000, n_train=20000, seed=0, target_accuracy=0.25), progress=False, **task_kw)
        base = dict(steps=steps, n_prompts=64, group_size=8, max_new_tokens=12, lr=3e-4, ppo_epochs=4, n_minibatches=16, n_eval=200,
                    eval_every=steps, n_train=20000)
        algo = get_algo("grpo", beta=0.0)
    elif design == "V1-long":   # 56_value_init: PPO, a critic trained beside the policy, long scratchpad answers
        d = designs["V1-long"]; start = d.start()
        base = {**d.base, "steps": steps}
        algo, task, task_kw = get_algo("ppo"), d.task, d.task_kw
    elif design == "micro":   # the fingerprint's micro runs: the smallest lab runs there are
        from rl_notes.fingerprint import micro_model, MICRO_RUN, TASK_KW
        from rl_notes.cache import cache_dir
        start = cache_dir("bench", "micro_model")
        if not (start / "config.json").is_file(): micro_model(start)
        task, task_kw = TASK_KW["add1"]
        base = {**MICRO_RUN, "steps": steps, "eval_every": steps}
        base.pop("progress"); base.pop("threads")
        algo = get_algo("grpo", beta=0.0)
    else: raise ValueError(f"--designs: unknown design {design!r} (D3, D1, V1-long, micro)")
    from rl_notes.lab import LAB_PATH   # the path a lab worker trains on (the speed levers off), so both sides compute the same run
    return [TrainConfig(model=str(start), algo=algo, task=task, task_kw=task_kw, seed=s, out_dir=str(root / f"s{s}"), progress=False,
                        threads=1, **{**base, **LAB_PATH}) for s in range(P)]


def cpu_seconds(f) -> float:
    t0 = time.process_time(); f(); return time.process_time() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", default="D3:4,D1:2,V1-long:2,micro:20", help="design:steps, comma-separated")
    ap.add_argument("--sizes", default="4,8,16"); ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    from rl_notes.trainer import train
    from rl_notes.population import train_population
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread; CPU seconds, median of {a.repeats}")
    for spec in a.designs.split(","):
        design, steps = spec.split(":"); steps = int(steps)
        single = []
        for _ in range(a.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                c = configs(design, 1, steps, Path(tmp))[0]
                single.append(cpu_seconds(lambda: train(c)))
        s = statistics.median(single)
        print(f"{design}: one run {s:.1f} s ({3600 / s:.0f} runs per core-hour at {steps} steps)")
        for P in map(int, a.sizes.split(",")):
            ts, st = [], {}
            for _ in range(a.repeats):
                with tempfile.TemporaryDirectory() as tmp:
                    out, cs = [], configs(design, P, steps, Path(tmp))
                    ts.append(cpu_seconds(lambda: out.extend(train_population(cs, stats=st))))
                    bad = [r for r in out if isinstance(r, BaseException)]
                    if bad: raise bad[0]
            t = statistics.median(ts)
            print(f"{design}: population of {P:2d} {t:6.1f} s = {t / P:5.2f} s per run; runs per core-hour {3600 * P / t:6.0f}, "
                  f"{s * P / t:.2f}x one run per process (min {s * P / max(ts):.2f}x, max {s * P / min(ts):.2f}x)")
            b = st["busy"]; tot = sum(b.values())
            print(f"{'':<4}where the last repeat's main thread spent its time: " + ", ".join(f"{k} {v / tot:.0%}" for k, v in b.items()) +
                  " (waiting: the members' own Python between passes)")
            print(f"RESULT population of {P} runs vs one run per process, {design} ({steps} steps, 1 thread) | "
                  f"{s * P / t:.2f}x the runs per core-hour (median of {a.repeats})")


if __name__ == "__main__":
    main()
