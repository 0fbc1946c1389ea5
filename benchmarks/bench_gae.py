"""Benchmark `rl_notes.ppo.gae` (compaction + blocked scan) against `gae_reference` (the per-timestep loop that TRL,
verl and OpenRLHF use). float32, one CPU thread by default; ratios are medians of repeats measured in the same run.
On CPU the clock is the process's CPU time (`time.process_time`), so other jobs on a shared machine do not inflate
either side; on CUDA it is wall time with synchronisation.
Error = max |fast(float32) - reference(float64)| over unmasked positions; the loop's own float32 error is shown too.

Inputs: values ~ U(0, 1), per-token rewards ~ N(0, 0.01^2) (a KL-penalty-like term) plus a terminal reward in {0, 1}
at each row's last unmasked position: the shape of LLM PPO rewards.

Usage: python benchmarks/bench_gae.py [--device cpu|cuda] [--threads 1] [--repeats 7] [--quick]
"""
import argparse, platform, subprocess, time
import torch
from rl_notes.ppo import gae, gae_reference

def make(B, T, p_inside=0.0, right_pad=False, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    v = torch.rand(B, T, generator=g, dtype=torch.float64)
    r = 0.01 * torch.randn(B, T, generator=g, dtype=torch.float64)
    m = torch.rand(B, T, generator=g) >= p_inside
    if right_pad:
        L = torch.randint(T // 2, T + 1, (B,), generator=g)
        m &= torch.arange(T)[None] < L[:, None]
    last = (m.long() * torch.arange(T)).argmax(-1)
    r[torch.arange(B), last] += (torch.rand(B, generator=g) > 0.5).double()
    return r.to(device), v.to(device), m.to(device)

def timeit(f, repeats, device):
    "Median time of `repeats` calls: CPU time of this process on CPU (robust on a shared machine), wall time on CUDA."
    clock = time.perf_counter if device == "cuda" else time.process_time
    ts = []
    for _ in range(repeats):
        if device == "cuda": torch.cuda.synchronize()
        t0 = clock(); f()
        if device == "cuda": torch.cuda.synchronize()
        ts.append(clock() - t0)
    return sorted(ts)[len(ts) // 2]

def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name"))
    except Exception: return platform.processor() or "unknown"

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu"); ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7); ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = a.device
    print(f"# bench_gae: torch {torch.__version__}, device {dev}"
          + (f" ({torch.cuda.get_device_name()})" if dev == "cuda" else f" ({cpu_name()}), {a.threads} thread(s)"))
    # (name, B, T, p_inside, right_pad, gamma*lam list)
    cases = [("B=64,T=8192, no padding", 64, 8192, 0.0, False, [0.95]),
             ("B=64,T=8192, 30% masked + right pad", 64, 8192, 0.3, True, [0.95])]
    if not a.quick:
        cases += [("B=8,T=32768", 8, 32768, 0.0, False, [0.9, 0.95, 0.99, 1.0]),
                  ("B=8,T=32768, 30% masked + pad", 8, 32768, 0.3, True, [0.99, 1.0]),
                  ("B=1,T=131072", 1, 131072, 0.0, False, [0.9, 0.95, 0.99, 1.0])]
    print("| case | gamma*lam | loop ms | gae ms | speed-up | max err gae (fp32) | max err loop (fp32) | finite |")
    print("|---|---|---|---|---|---|---|---|")
    res = []
    for name, B, T, p, pad, gls in cases:
        r64, v64, m = make(B, T, p, pad, device=dev)
        r32, v32 = r64.float(), v64.float()
        for gl in gls:
            # gamma = 1 and lam = gamma*lam (the LLM setting); the recurrence only sees the product
            ref64, _ = gae_reference(r64, v64, m, 1.0, gl)
            fast, ret = gae(r32, v32, m, 1.0, gl)
            loop32, _ = gae_reference(r32, v32, m, 1.0, gl)
            finite = bool(torch.isfinite(fast).all() and torch.isfinite(ret).all())
            err = float((fast.double() - ref64)[m].abs().max())
            err_loop = float((loop32.double() - ref64)[m].abs().max())
            t_fast = timeit(lambda: gae(r32, v32, m, 1.0, gl), a.repeats, dev)
            t_loop = timeit(lambda: gae_reference(r32, v32, m, 1.0, gl), max(3, a.repeats // 2), dev)
            print(f"| {name} | {gl} | {t_loop*1e3:.1f} | {t_fast*1e3:.2f} | {t_loop/t_fast:.0f}x | {err:.1e} | {err_loop:.1e} | {finite} |")
            res.append((name, gl, t_loop / t_fast, err, finite))
    # the summary line (RESULT what | result) that 10_ppo prints and the results page (nbs/results.ipynb) collects
    sp = {n: [r[2] for r in res if r[0] == n] for n in dict.fromkeys(r[0] for r in res)}   # speed-ups per case, over gamma*lam
    print(f"\nRESULT `gae` vs the per-timestep loop, float32, {'CUDA' if dev == 'cuda' else f'{a.threads} CPU thread(s)'} | "
          + ", ".join(f"{min(v):.0f}x" + (f"-{max(v):.0f}x" if len(v) > 1 else "") + f" ({n})" for n, v in sp.items())
          + f"; largest error {max(r[3] for r in res):.1e}, all finite: {all(r[4] for r in res)}")

if __name__ == "__main__": main()
