"""Memory and time of one DPO step (forward + backward) through `rl_notes.dpo.concatenated_forward`, against the
naive path (shifted logits, log_softmax, gather) on the same tiny Llama and the same batch.

    python benchmarks/bench_dpo.py                      # V=32000, T=512, 1 pair (2 sequences), d=64, 2 layers
    python benchmarks/bench_dpo.py --pairs 2 --T 256

Every case runs in a fresh subprocess (so one case's allocator state cannot hide another's). In the child: build the
model and the batch, run one short warm-up step (T=16) so the parameter gradients already exist, then measure
extra memory = peak resident memory (resource.getrusage ru_maxrss) during one full DPO step minus the resident memory
(/proc/self/statm) just before it. It is reported in units of the (2B, T, V) float32 logits tensor, which the step
itself allocates. A third case, trunk_only, runs the same transformer without the LM head, to subtract the
activations that are not the log-prob path's: "beyond logits and trunk" = (extra - trunk_only extra) / logits - 1. Times are medians of --repeats further steps in the same
child. Loss values of both paths are printed to show they compute the same thing.
"""
import argparse, json, os, platform, resource, subprocess, sys, time

CASES = ["concatenated_forward", "naive", "trunk_only"]


def _rss():
    with open("/proc/self/statm") as f: return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _naive_step(model, batch, ref_c, ref_r):
    import torch
    from rl_notes.dpo import dpo_loss
    T = max(batch["chosen_input_ids"].shape[1], batch["rejected_input_ids"].shape[1])
    pad = lambda x: torch.nn.functional.pad(x, (0, T - x.shape[1]))
    ids = torch.cat([pad(batch["chosen_input_ids"]), pad(batch["rejected_input_ids"])])
    attn = torch.cat([pad(batch["chosen_attention_mask"]), pad(batch["rejected_attention_mask"])])
    resp = torch.cat([pad(batch["chosen_response_mask"]), pad(batch["rejected_response_mask"])])
    logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1]       # (2B, T-1, V) view
    lp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)                     # (2B, T-1)
    seq = (lp * resp[:, 1:]).sum(-1)
    B = ids.shape[0] // 2
    return dpo_loss(seq[:B], seq[B:], ref_c, ref_r)[0]


def _trunk_step(model, batch, ref_c, ref_r):
    "The floor: the same transformer trunk and batch without the LM head (no logits at all)."
    import torch
    ids = torch.cat([batch["chosen_input_ids"], torch.nn.functional.pad(batch["rejected_input_ids"], (0, 7))])
    h = model.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).last_hidden_state
    return h.float().pow(2).mean()


def _fast_step(model, batch, ref_c, ref_r):
    from rl_notes.dpo import concatenated_forward, dpo_loss
    out = concatenated_forward(model, batch)
    return dpo_loss(out["chosen_logps"], out["rejected_logps"], ref_c, ref_r)[0]


def _model(V, T, d, layers, seed=0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=d, intermediate_size=2 * d, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=max(T, 16) + 1)
    return LlamaForCausalLM(cfg)


def _batch(V, T, pairs, seed=0):
    import torch
    from rl_notes.dpo import collate_pairs
    g = torch.Generator().manual_seed(seed)
    P = T // 4
    rnd = lambda n: torch.randint(3, V, (n,), generator=g).tolist()
    prompts = [rnd(P) for _ in range(pairs)]
    batch = collate_pairs(prompts, [rnd(T - P) for _ in range(pairs)], [rnd(T - P - 7) for _ in range(pairs)])
    return batch


def run_case(case, V, T, pairs, d, layers, repeats, threads):
    "Runs in the child process: prints one JSON line."
    import torch
    torch.set_num_threads(threads)
    step = {"concatenated_forward": _fast_step, "naive": _naive_step, "trunk_only": _trunk_step}[case]
    model, batch = _model(V, T, d, layers), _batch(V, T, pairs)
    ref_c, ref_r = torch.full((pairs,), -float(T) * 10), torch.full((pairs,), -float(T) * 10)
    warm = _batch(V, 16, pairs)
    step(model, warm, ref_c, ref_r).backward()                      # parameter .grad tensors now exist
    base = _rss()
    loss = step(model, batch, ref_c, ref_r)
    loss.backward()
    extra = max(_peak() - base, 0)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter(); step(model, batch, ref_c, ref_r).backward(); ts.append(time.perf_counter() - t0)
    ts.sort()
    logits_bytes = 2 * pairs * T * V * 4
    print(json.dumps(dict(case=case, extra=extra, logits=logits_bytes, t=ts[len(ts) // 2], loss=loss.item())))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--V", type=int, default=32000)
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:
        return run_case(a.child, a.V, a.T, a.pairs, a.d, a.layers, a.repeats, a.threads)
    import torch
    rows = []
    for case in CASES:
        cmd = [sys.executable, __file__, "--child", case] + [f"--{k}={getattr(a, k)}" for k in ("V", "T", "pairs", "d", "layers", "repeats", "threads")]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode: sys.exit(f"case {case} failed:\n{p.stderr}")
        rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    print(f"DPO step (forward+backward), tiny Llama d={a.d} x {a.layers} layers, V={a.V}, T={a.T}, {a.pairs} pair(s) "
          f"= {2 * a.pairs} sequences; logits {rows[0]['logits'] / 2**20:.0f} MiB float32")
    print(f"CPU: {cpu}, {a.threads} threads; torch {torch.__version__}; peak RSS (getrusage ru_maxrss), fresh subprocess per case")
    base = next(r for r in rows if r["case"] == "naive")
    trunk = next(r for r in rows if r["case"] == "trunk_only")
    print("| path | extra peak memory (MiB) | x logits | beyond logits and trunk (x logits) | step time (ms) | time vs naive | loss |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        x = r["extra"] / r["logits"]
        beyond = "" if r is trunk else f"{(r['extra'] - trunk['extra']) / r['logits'] - 1:.2f}"
        loss = "" if r is trunk else f"{r['loss']:.6f}"
        print(f"| {r['case']} | {r['extra'] / 2**20:.0f} | {x:.2f} | {beyond} | {r['t'] * 1e3:.0f} | "
              f"{r['t'] / base['t']:.2f} | {loss} |")
    print("'beyond logits and trunk' = (extra - extra of trunk_only) / logits - 1: memory of the log-prob path itself "
          "besides the logits tensor; the gradient of the logits alone is 1.00.")
    ours = next(r for r in rows if r["case"] == "concatenated_forward")
    beyond = lambda r: (r["extra"] - trunk["extra"]) / r["logits"] - 1
    print(f"RESULT one DPO step through `concatenated_forward` vs the naive log_softmax + gather path (V={a.V}, T={a.T}, "
          f"{2 * a.pairs} sequences) | memory beyond the logits and the trunk {beyond(ours):.2f}x vs {beyond(base):.2f}x the logits, "
          f"{ours['t'] / base['t']:.2f}x the time, loss {abs(ours['loss'] - base['loss']):.1e} apart")


if __name__ == "__main__":
    main()
