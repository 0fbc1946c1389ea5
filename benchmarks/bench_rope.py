"""Benchmark rl_notes.rope.apply_rope against transformers' apply_rotary_pos_emb (rotate_half).

    python benchmarks/bench_rope.py                 # q (1,32,4096,128), k (1,8,4096,128), CPU, 2 threads
    python benchmarks/bench_rope.py --small         # quick smoke run (T=512)
    python benchmarks/bench_rope.py --device cuda   # GPU ratio, when a GPU is present

Both sides get precomputed cos/sin tables (built outside the timed region): transformers its (1, T, D) tables from
LlamaRotaryEmbedding, apply_rope its (T, D/2) tables from rope_cos_sin (a row also times apply_rope on transformers'
tables). The methods are timed round-robin (one call of each per round) so that load from other processes hits all of
them alike; the table shows the median over rounds (and, as a check against load spikes, the ratio of the minima). Error = max |out - transformers| over q and k (float32 rows), and
max |out - float64 reference| for both sides (bf16 rows).
"""
import argparse, platform, statistics, subprocess, time
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
from rl_notes.rope import rope_inv_freq, rope_cos_sin, apply_rope

def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name"))
    except Exception: return platform.processor() or "unknown"

def meta_complex(q, k, freqs_cis):
    "Meta's Llama reference: interleaved pairs as complex numbers times e^{i m theta} (float32 only)."
    qc = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    kc = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    return torch.view_as_real(qc * freqs_cis).flatten(-2).type_as(q), torch.view_as_real(kc * freqs_cis).flatten(-2).type_as(k)

def timeit_rr(fns, repeats, sync):
    "Round-robin timing: per round, call each fn once; return the median seconds per fn."
    ts = {n: [] for n in fns}
    for f in fns.values(): f(); sync()           # warm-up
    for _ in range(repeats):
        for n, f in fns.items():
            sync(); t0 = time.perf_counter(); f(); sync(); ts[n].append(time.perf_counter() - t0)
    return {n: statistics.median(v) for n, v in ts.items()}, {n: min(v) for n, v in ts.items()}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads); torch.manual_seed(0)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    B, H, Hkv, T, D = 1, 32, 8, (512 if a.small else 4096), 128
    hw = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"{cpu_name()}, {a.threads} threads"
    print(f"# apply_rope vs transformers.apply_rotary_pos_emb | {hw} | torch {torch.__version__} | "
          f"q ({B},{H},{T},{D}) k ({B},{Hkv},{T},{D}) | median of {a.repeats} round-robin repeats\n")
    print("| case | baseline ms | apply_rope ms | speedup (medians) | speedup (minima) | max abs err (ours) | max abs err (baseline) |")
    print("|---|---|---|---|---|---|---|")
    cfg = LlamaConfig(hidden_size=H * D, num_attention_heads=H, num_key_value_heads=Hkv, max_position_embeddings=T)
    rot = LlamaRotaryEmbedding(cfg).to(dev)
    pid = torch.arange(T, device=dev)[None]
    inv = rope_inv_freq(D, base=cfg.rope_parameters["rope_theta"], device=dev).inv_freq
    speed = {}
    for dtype in [torch.float32, torch.bfloat16]:
        q = torch.randn(B, H, T, D, device=dev, dtype=dtype); k = torch.randn(B, Hkv, T, D, device=dev, dtype=dtype)
        hc, hs = rot(q, pid)                               # (1, T, D) in q.dtype
        c, s = rope_cos_sin(pid[0], inv, dtype=dtype)      # (T, D/2)
        fns = {"hf": lambda: apply_rotary_pos_emb(q, k, hc, hs),
               "ours": lambda: apply_rope(q, k, c, s),
               "ours_hf_tables": lambda: apply_rope(q, k, hc, hs)}
        tm, tmin = timeit_rr(fns, a.repeats, sync)
        hq, hk = apply_rotary_pos_emb(q, k, hc, hs); oq, ok = apply_rope(q, k, c, s); o2q, o2k = apply_rope(q, k, hc, hs)
        if dtype == torch.float32:
            err = lambda x, y: (x - y).abs().max().item()
            e_ours, e_ours2, e_hf = max(err(oq, hq), err(ok, hk)), max(err(o2q, hq), err(o2k, hk)), 0.0
        else:
            c64, s64 = rope_cos_sin(pid[0], inv.double(), dtype=torch.float64)
            rq, rk = apply_rope(q.double(), k.double(), c64, s64)
            err = lambda x, y: (x.double() - y).abs().max().item()
            e_ours, e_ours2, e_hf = max(err(oq, rq), err(ok, rk)), max(err(o2q, rq), err(o2k, rk)), max(err(hq, rq), err(hk, rk))
        name = str(dtype).replace("torch.", "")
        speed[name] = (tm['hf'] / tm['ours'], max(e_ours, e_ours2))
        print(f"| {name}, half, vs transformers, (T, D/2) tables | {tm['hf']*1e3:.1f} | {tm['ours']*1e3:.1f} | {tm['hf']/tm['ours']:.2f}x | {tmin['hf']/tmin['ours']:.2f}x | {e_ours:.2g} | {e_hf:.2g} |")
        print(f"| {name}, half, vs transformers, transformers' (1, T, D) tables | {tm['hf']*1e3:.1f} | {tm['ours_hf_tables']*1e3:.1f} | {tm['hf']/tm['ours_hf_tables']:.2f}x | {tmin['hf']/tmin['ours_hf_tables']:.2f}x | {e_ours2:.2g} | {e_hf:.2g} |")
        del q, k, hq, hk, oq, ok, o2q, o2k
    # interleaved layout against Meta's complex-number reference (float32)
    q = torch.randn(B, H, T, D, device=dev); k = torch.randn(B, Hkv, T, D, device=dev)
    c, s = rope_cos_sin(pid[0], inv)
    freqs_cis = torch.polar(torch.ones_like(c), pid[0, :, None].float() * inv)   # (T, D/2) complex64
    tm, tmin = timeit_rr({"meta": lambda: meta_complex(q, k, freqs_cis), "ours": lambda: apply_rope(q, k, c, s, layout="interleaved")}, a.repeats, sync)
    mq, mk = meta_complex(q, k, freqs_cis); oq, ok = apply_rope(q, k, c, s, layout="interleaved")
    e = max((oq - mq).abs().max().item(), (ok - mk).abs().max().item())
    print(f"| float32, interleaved, vs Meta's complex multiply | {tm['meta']*1e3:.1f} | {tm['ours']*1e3:.1f} | {tm['meta']/tm['ours']:.2f}x | {tmin['meta']/tmin['ours']:.2f}x | {e:.2g} | 0 |")
    # the summary line (RESULT what | result) that 01_rope prints and the results page (nbs/results.ipynb) collects
    print(f"\nRESULT `apply_rope` vs transformers' `apply_rotary_pos_emb`, q ({B},{H},{T},{D}), {hw} | "
          f"{speed['float32'][0]:.2f}x faster in float32 (error {speed['float32'][1]:.1e}), {speed['bfloat16'][0]:.2f}x in bfloat16 (medians of {a.repeats})")

if __name__ == "__main__": main()
