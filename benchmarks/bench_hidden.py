"""Log-probs from the hidden states (`rl_notes.core.logprobs_from_hidden`) against the logits path (the LM head's matmul,
then `logprobs_from_logits`) and TRL's `ChunkedLogProbFunction` (its torch path on a CPU), at Qwen's vocabulary.

    python benchmarks/bench_hidden.py                 # V = 151936, H = 896 (Qwen2-0.5B's head), 4096 tokens
    python benchmarks/bench_hidden.py --tokens 1024   # smaller

Every case runs in a fresh subprocess. Extra memory = peak resident memory (ru_maxrss) during the call minus the resident
memory just before it (hidden states and head already allocated), also as a multiple of the float32 logits' size
(tokens x V x 4 bytes). Time: one call after one warm-up call. "vs logits" is the ratio to the logits path measured in
the same run. The log-prob and gradient errors are max |difference| to the logits path.
"""
import argparse, json, os, platform, resource, subprocess, sys, time

METHODS = ["logits", "hidden", "trl"]

def _rss():
    with open("/proc/self/statm") as f: return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def _peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def run_case(N, H, V, method, backward, threads):
    "In the child process: one JSON line."
    import torch
    from rl_notes.core import logprobs_from_logits, logprobs_from_hidden
    torch.set_num_threads(threads); torch.manual_seed(0)
    h, W = torch.randn(N, H), torch.randn(V, H) / H ** 0.5
    y = torch.randint(0, V, (N,))
    if method == "logits": f = lambda h, W: logprobs_from_logits(h @ W.t(), y)
    elif method == "hidden": f = lambda h, W: logprobs_from_hidden(h, W, y)
    else:
        from trl.kernels.chunked_logprob import ChunkedLogProbFunction
        f = lambda h, W: ChunkedLogProbFunction.apply(h, W, None, y, 1.0, 8192, None, 1.0, ())[0]
    if backward: h.requires_grad_(); W.requires_grad_()
    def call():
        out = f(h, W)
        if backward: out.sum().backward()
        return out.detach()
    base = _rss()
    out = call()
    extra = max(_peak() - base, 0)
    grads = [t.grad.clone() for t in (h, W)] if backward else []
    for t in (h, W): t.grad = None
    t0 = time.perf_counter(); call(); dt = time.perf_counter() - t0
    torch.save({"out": out, "grads": grads}, os.environ["BENCH_OUT"])
    print(json.dumps(dict(extra=extra, time=dt)))

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096); ap.add_argument("--hidden", type=int, default=896)
    ap.add_argument("--vocab", type=int, default=151936); ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--case", nargs=3)
    a = ap.parse_args()
    if a.case: return run_case(a.tokens, a.hidden, a.vocab, a.case[0], a.case[1] == "1", a.threads)
    import tempfile, torch
    N, H, V = a.tokens, a.hidden, a.vocab
    logits_bytes = N * V * 4
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {a.threads} threads, float32; "
          f"{N} tokens, H = {H}, V = {V}: the logits are {logits_bytes / 2**30:.2f} GiB")
    print("| pass | method | time s | vs logits | extra mem GiB | extra mem (x logits) | max err logp | max err grad |")
    print("|---|---|---|---|---|---|---|---|")
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for backward in (False, True):
            for m in METHODS:
                out = os.path.join(d, f"{m}{int(backward)}.pt")
                p = subprocess.run([sys.executable, __file__, "--tokens", str(N), "--hidden", str(H), "--vocab", str(V), "--threads", str(a.threads),
                                    "--case", m, str(int(backward)), "x"], capture_output=True, text=True, env={**os.environ, "BENCH_OUT": out})
                if p.returncode: print(f"| {'fwd+bwd' if backward else 'fwd'} | {m} | failed: {p.stderr.strip().splitlines()[-1]} |||||| "); continue
                r = json.loads(p.stdout.strip().splitlines()[-1]); r["saved"] = torch.load(out)
                res[(m, backward)] = r
            base = res.get(("logits", backward))
            for m in METHODS:
                r = res.get((m, backward))
                if r is None: continue
                e_lp = float((r["saved"]["out"] - base["saved"]["out"]).abs().max()) if base else float("nan")
                e_g = max((float((x - y).abs().max()) for x, y in zip(r["saved"]["grads"], base["saved"]["grads"])), default=None) if base else None
                print(f"| {'fwd+bwd' if backward else 'fwd'} | {m} | {r['time']:.3f} | {r['time'] / base['time']:.2f}x | {r['extra'] / 2**30:.3f} | "
                      f"{r['extra'] / logits_bytes:.3f} | {e_lp:.1e} | {'-' if e_g is None else f'{e_g:.1e}'} |")
    for backward in (False, True):
        lo, hi = res.get(("logits", backward)), res.get(("hidden", backward))
        if lo and hi:
            print(f"RESULT logprobs_from_hidden vs the logits path, {N} tokens x V {V}, {'forward + backward' if backward else 'forward'} | "
                  f"extra memory {hi['extra'] / 2**30:.3f} GiB vs {lo['extra'] / 2**30:.3f} GiB ({hi['extra'] / max(lo['extra'], 1):.3f}x), "
                  f"time {hi['time'] / lo['time']:.2f}x")

if __name__ == "__main__": main()
