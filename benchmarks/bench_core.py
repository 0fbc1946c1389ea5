"""Benchmark rl_notes.core's log-prob / entropy kernels against the naive path and TRL's.

    python benchmarks/bench_core.py            # full sizes (V=151936; needs ~12 GB RAM, a few minutes)
    python benchmarks/bench_core.py --small    # V=32000 only (includes (2, 512, 32000), the 20M Qwen2's vocabulary)

Every case runs in a fresh subprocess. Extra memory = peak resident memory (ru_maxrss) during the call minus the
resident memory just before it, with the logits already allocated; reported as a multiple of the logits' size.
Times are medians of --repeats runs in the same subprocess. Errors are max |x - float64 reference|.
"""
import argparse, json, os, platform, resource, subprocess, sys, time

METHODS = ["rl_notes", "naive", "trl", "rl_notes_ent", "trl_ent"]
# "floor": allocating and writing a gradient-sized buffer, the least any backward pass must add (reference row)
FLOOR = "floor"

def _rss():
    with open("/proc/self/statm") as f: return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def _peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def _fn(method):
    import torch
    from rl_notes.core import logprobs_from_logits, logprobs_and_entropy
    if method == "rl_notes": return lambda x, y: logprobs_from_logits(x, y)
    if method == "rl_notes_ent": return lambda x, y: logprobs_and_entropy(x, y)
    if method == FLOOR: return lambda x, y: torch.zeros_like(x)
    if method == "naive": return lambda x, y: x.log_softmax(-1).gather(-1, y[..., None]).squeeze(-1)
    from trl.trainer.utils import selective_log_softmax, entropy_from_logits
    if method == "trl": return lambda x, y: selective_log_softmax(x, y)
    if method == "trl_ent": return lambda x, y: (selective_log_softmax(x, y), entropy_from_logits(x))
    raise ValueError(method)

def _scalar(out):
    return sum(o.sum() for o in out) if isinstance(out, tuple) else out.sum()

def run_case(B, T, V, method, backward, repeats, threads):
    "Runs in the child process: prints one JSON line."
    import torch
    torch.set_num_threads(threads); torch.manual_seed(0)
    x = torch.randn(B, T, V); y = torch.randint(0, V, (B, T))
    f = _fn(method)
    if backward and method != FLOOR: x.requires_grad_()
    base = _rss()
    out = f(x, y)
    if backward and method != FLOOR: _scalar(out).backward()
    extra = max(_peak() - base, 0)
    del out
    if backward: x.grad = None
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter(); out = f(x, y)
        if backward and method != FLOOR: _scalar(out).backward(); x.grad = None
        ts.append(time.perf_counter() - t0); del out
    ts.sort()
    err_lp = err_ent = None
    if not backward and method != FLOOR:  # accuracy against a float64 reference, row by row to bound memory
        with torch.no_grad():
            out = f(x, y)
            lp, ent = out if isinstance(out, tuple) else (out, None)
            e1 = e2 = 0.0
            for b in range(B):
                for s in range(0, T, 256):
                    r = x[b, s:s+256].double().log_softmax(-1)
                    e1 = max(e1, (lp[b, s:s+256].double() - r.gather(-1, y[b, s:s+256, None]).squeeze(-1)).abs().max().item())
                    if ent is not None:
                        e2 = max(e2, (ent[b, s:s+256].double() + (r.exp() * r).sum(-1)).abs().max().item())
            err_lp, err_ent = e1, (e2 if ent is not None else None)
    print(json.dumps(dict(time=ts[len(ts) // 2], extra=extra / (x.numel() * x.element_size()), err_lp=err_lp, err_ent=err_ent)))

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="V=32000 and shorter sequences (smoke run)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    ap.add_argument("--only", help="comma-separated methods to run (default: all)")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    a = ap.parse_args()
    threads = a.threads or os.cpu_count()
    if a.case:
        B, T, V, m, bw = a.case.split(",")
        return run_case(int(B), int(T), int(V), m, bw == "1", a.repeats, threads)
    import torch
    # V=32000: Llama-2 / Mistral and the 20M random Qwen2 of bench_real.py; V=151936: Qwen2.5. (8, 64, 32000) is a GRPO
    # batch (B*T = 512 rows, short rows): TRL's per-batch-row loop works on 8 MB slices there, its best case
    small = [(2, 256, 32000), (1, 512, 32000), (2, 512, 32000), (8, 64, 32000)]
    shapes = small if a.small else [(4, 1024, 151936), (1, 4096, 151936)] + small[2:]
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except Exception: pass
    print(f"# {cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {threads} threads, float32, median of {a.repeats}")
    rows = []
    for (B, T, V) in shapes:
        for bw in (0, 1):
            res = {}
            methods = METHODS + ([FLOOR] if bw else [])
            if a.only: methods = [m for m in methods if m in a.only.split(",")]
            for m in methods:
                need = B * T * V * 4 * (10 if (bw and m == "trl_ent") else 5)
                avail = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable"))
                if need > 0.8 * avail:
                    res[m] = None; print(f"# skipped {m} {'fwd+bwd' if bw else 'fwd'} at {(B, T, V)}: needs ~{need/2**30:.0f} GB", file=sys.stderr); continue
                cmd = [sys.executable, __file__, "--case", f"{B},{T},{V},{m},{bw}", "--repeats", str(a.repeats), "--threads", str(threads)]
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode: print(p.stderr[-2000:], file=sys.stderr); raise SystemExit(f"case {m} failed")
                res[m] = json.loads(p.stdout.strip().splitlines()[-1])
            rows.append(((B, T, V), bw, res))
    hdr = "| shape (B,T,V) | pass | method | time s | vs TRL | extra mem (x logits) | max err logp | max err entropy |"
    print(hdr); print("|" + "---|" * 8)
    for (shape, bw, res) in rows:
        for m in res:
            r = res[m]; b = res.get("trl_ent" if m.endswith("_ent") else "trl")
            if r is None: print(f"| {shape} | {'fwd+bwd' if bw else 'fwd'} | {m} | skipped (memory) | | | | |"); continue
            fmt = lambda v: "-" if v is None else f"{v:.1e}"
            ratio = f"{r['time'] / b['time']:.2f}x" if b else "-"
            print(f"| {shape} | {'fwd+bwd' if bw else 'fwd'} | {m} | {r['time']:.3f} | {ratio} | {r['extra']:.3f} | {fmt(r['err_lp'])} | {fmt(r['err_ent'])} |")
    # the summary lines (RESULT what | result) that the notebooks print and the results page (nbs/results.ipynb) collects
    Vmax = max(s[2] for s in shapes)
    big = [(bw, res) for (s, bw, res) in rows if s[2] == Vmax]
    def span(bw, m, base, key="time"):
        v = [res[m][key] / (res[base][key] if base else 1) for b, res in big if b == bw and res.get(m) and (base is None or res.get(base))]
        d = 3 if key == "extra" else 2      # extra memory: 0.004x is not 0.00x
        return (f"{min(v):.{d}f}x-{max(v):.{d}f}x" if len(v) > 1 and f"{min(v):.{d}f}" != f"{max(v):.{d}f}" else f"{v[0]:.{d}f}x") if v else "-"
    def worst(bw, m, key):
        v = [res[m][key] for b, res in big if b == bw and res.get(m) and res[m][key] is not None]
        return f"{max(v):.1e}" if v else "-"
    shp = ", ".join(str(s) for s in shapes if s[2] == Vmax)
    print(f"RESULT `logprobs_from_logits` vs TRL's `selective_log_softmax`, {shp}, {threads} thread(s) | forward {span(0, 'rl_notes', 'trl')} "
          f"the time, {span(0, 'rl_notes', None, 'extra')} the logits in extra memory (TRL {span(0, 'trl', None, 'extra')}); forward + backward "
          f"{span(1, 'rl_notes', 'trl')} the time at {span(1, 'rl_notes', None, 'extra')} the logits (the gradient alone: "
          f"{span(1, FLOOR, None, 'extra')}; TRL {span(1, 'trl', None, 'extra')})")
    print(f"RESULT `logprobs_and_entropy` vs TRL's `selective_log_softmax` + `entropy_from_logits`, same shapes | forward "
          f"{span(0, 'rl_notes_ent', 'trl_ent')} the time; entropy error {worst(0, 'rl_notes_ent', 'err_ent')} (TRL "
          f"{worst(0, 'trl_ent', 'err_ent')}), log-prob error {worst(0, 'rl_notes', 'err_lp')}")

if __name__ == "__main__":
    main()
