"""The D1 setting of 51_clip_higher (countdown, 64 prompts x 8, 4 epochs x 16 minibatches = 64 optimizer steps per batch,
lr 3e-4, 12 new tokens, GRPO with beta 0), shortened to a few RL steps: this tree's code against another git revision
(default `main`), alternating in fresh processes, median of the repeats; prints the ratio old/new (>1: this tree faster)
of the process CPU time and of the wall time of `train`, and whether the metric rows (timings excluded) are identical. On
a shared machine the CPU time is the measure to read: one thread does the work, and the wall time adds whatever the
scheduler gives to other processes.

The old revision is written to a temporary directory with `git archive`; both sides train from the same SFT checkpoint
(the D1 warm start, built once with this tree's code and cached, or `--model`).

    python benchmarks/bench_d1.py [--old main] [--repeats 5] [--steps 3] [--model DIR] [--algo grpo]
"""
import argparse, json, os, statistics, subprocess, sys, tarfile, tempfile, io, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CD_TASK = dict(n_numbers=4, max_number=9, max_target=99)
CD_SFT = dict(steps=3000, n_train=20000, seed=0, target_accuracy=0.25)
D1 = dict(n_prompts=64, group_size=8, max_new_tokens=12, lr=3e-4, ppo_epochs=4, n_minibatches=16, n_eval=0, n_train=20000)

def child(model, out, steps, algo):
    "One shortened D1 run in this process (the code on sys.path); prints its rows and the time of `train` as JSON."
    import torch
    torch.set_num_threads(1)
    from rl_notes.trainconfig import TrainConfig, get_algo
    from rl_notes.trainer import train
    cfg = TrainConfig(model=model, algo=get_algo(algo, beta=0.0), task="countdown", task_kw=CD_TASK, seed=0, steps=steps, out_dir=out,
                      overwrite=True, progress=False, threads=1, **D1)
    t0, c0 = time.perf_counter(), time.process_time()
    rows = train(cfg)
    print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "rows": rows}))

def timed(tree, model, tmp, steps, algo):
    "Run `child` in a fresh process with `tree` first on the path; ({cpu, wall} of train, rows without timings)."
    env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, os.path.join(tmp, "run"), str(steps), algo]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    if p.returncode: sys.exit(f"run with {tree} failed:\n{p.stderr[-3000:]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    return {"cpu": res["cpu"], "wall": res["wall"]}, [{k: v for k, v in r.items() if not k.startswith("time")} for r in res["rows"]]

def old_tree(rev, dest):
    "The files of git revision `rev` of this repository, written under `dest`."
    tar = subprocess.run(["git", "-C", ROOT, "archive", rev], capture_output=True, check=True).stdout
    tarfile.open(fileobj=io.BytesIO(tar)).extractall(dest)
    return dest

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="main", help="git revision to compare against"); ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="RL steps per run"); ap.add_argument("--algo", default="grpo")
    ap.add_argument("--model", default=None, help="SFT checkpoint; default the D1 warm start (cached)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child: return child(a.child[0], a.child[1], int(a.child[2]), a.child[3])
    sys.path.insert(0, ROOT)
    from rl_notes.lab import sft_warm_start
    from rl_notes.sft import SFTConfig
    model = a.model or str(sft_warm_start("countdown", SFTConfig(**CD_SFT), progress=False, **CD_TASK))
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"old": old_tree(a.old, os.path.join(tmp, "old")), "new": ROOT}
        t, rows = {k: {"cpu": [], "wall": []} for k in trees}, {}
        for i in range(a.repeats):   # alternate, so that a change of machine load hits both sides alike
            for k in (("old", "new") if i % 2 == 0 else ("new", "old")):
                w, rows[k] = timed(trees[k], model, tmp, a.steps, a.algo)
                for m in w: t[k][m].append(w[m])
                print(f"# repeat {i + 1}/{a.repeats} {k}: cpu {w['cpu']:.2f} s, wall {w['wall']:.2f} s", file=sys.stderr, flush=True)
    same = rows["old"] == rows["new"]
    print(f"D1 setting, {a.steps} RL steps ({a.algo}, beta 0; 64 prompts x 8, 64 optimizer steps per batch, 1 thread), "
          f"{a.repeats} alternating repeats in fresh processes; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| time of train() | old: " + a.old + " (median, min-max s) | new: this tree | ratio old/new of the medians | per-pair ratios |")
    print("|---|---|---|---|---|")
    res = {}
    for m in ("cpu", "wall"):
        o, n = t["old"][m], t["new"][m]
        pairs = [x / y for x, y in zip(o, n)]
        res[m] = (statistics.median(o) / statistics.median(n), min(pairs), max(pairs))
        print(f"| {'process CPU' if m == 'cpu' else 'wall'} | {statistics.median(o):.2f} ({min(o):.2f}-{max(o):.2f}) | "
              f"{statistics.median(n):.2f} ({min(n):.2f}-{max(n):.2f}) | {res[m][0]:.3f}x | {res[m][1]:.3f}-{res[m][2]:.3f}x |")
    print(f"metric rows (timings excluded) identical: {same}")
    print(f"RESULT D1-setting run ({a.steps} steps), {a.old} vs this tree | CPU time {res['cpu'][0]:.2f}x (pairs {res['cpu'][1]:.2f}-"
          f"{res['cpu'][2]:.2f}x), wall {res['wall'][0]:.2f}x, rows identical: {same}")
    print(f"(total benchmark time {time.time() - t_start:.0f} s)")

if __name__ == "__main__": main()
