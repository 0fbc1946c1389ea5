"Property-based tests for rl_notes.core (hypothesis)."
import math
import torch
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from rl_notes.core import (masked_sum, masked_mean, masked_var, masked_whiten, agg_loss, AGG_MODES,
                           logprobs_from_logits, logprobs_and_entropy, kl_penalty, KL_KINDS, lockstep)

SET = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

@st.composite
def batch(draw, min_b=1, max_b=5, max_t=9, allow_empty_rows=True):
    B = draw(st.integers(min_b, max_b)); T = draw(st.integers(1, max_t))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, generator=g, dtype=torch.float64)
    p = draw(st.floats(0.2, 1.0))
    mask = torch.rand(B, T, generator=g) < p
    if not allow_empty_rows: mask[:, 0] = True
    return x, mask, g

@SET
@given(batch(), st.sampled_from(AGG_MODES))
def test_masked_values_never_matter(b, mode):
    x, mask, g = b
    y = x.clone(); y[~mask] = torch.randn(int((~mask).sum()), generator=g, dtype=torch.float64) * 1e6
    y2 = x.clone(); y2[~mask] = float('nan')
    for z in (y, y2):
        assert torch.equal(agg_loss(x, mask, mode), agg_loss(z, mask, mode))
        assert torch.equal(masked_sum(x, mask, -1), masked_sum(z, mask, -1))
        assert torch.equal(masked_mean(x, mask, -1), masked_mean(z, mask, -1))
    if mask.sum() >= 2:
        assert torch.allclose(masked_whiten(x, mask), masked_whiten(y2, mask))

@SET
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_modes_agree_when_rows_have_equal_length(B, L, seed):
    g = torch.Generator().manual_seed(seed)
    T = L + 3
    x = torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = torch.zeros(B, T, dtype=torch.bool)
    for i in range(B):  # same length L per row, at different offsets
        o = int(torch.randint(0, 4, (1,), generator=g)); mask[i, o:o+L] = True
    tm = agg_loss(x, mask, "token-mean")
    assert torch.allclose(tm, agg_loss(x, mask, "seq-mean-token-mean"))
    assert torch.allclose(tm * L, agg_loss(x, mask, "seq-mean-token-sum"))
    assert torch.allclose(tm * L / T, agg_loss(x, mask, "seq-mean-token-sum-norm"))
    assert torch.allclose(tm, agg_loss(x, mask, "seq-mean-token-sum-norm", max_tokens=L))

@SET
@given(batch(allow_empty_rows=False), st.integers(1, 4))
def test_token_mean_split_invariance_with_global_tokens(b, k):
    "Splitting a batch over k 'ranks' and summing the per-rank losses (global_tokens = N) gives the full-batch loss."
    x, mask, g = b
    full = agg_loss(x, mask, "token-mean")
    N = int(mask.sum())
    parts = sum(agg_loss(x[i::k], mask[i::k], "token-mean", global_tokens=N) for i in range(min(k, x.shape[0])))
    assert torch.allclose(full, parts)

@SET
@given(batch(min_b=2))
def test_masked_var_matches_torch(b):
    x, mask, g = b
    if mask.sum() < 2: return
    assert torch.allclose(masked_var(x, mask), x[mask].var())
    assert torch.allclose(masked_mean(x, mask), x[mask].mean())

@SET
@given(st.integers(1, 3), st.integers(1, 6), st.integers(2, 70), st.floats(0.1, 8.0), st.integers(0, 2**31 - 1),
       st.sampled_from([None, 1, 3, 8]), st.sampled_from([1.0, 0.6, 1.7]))
def test_logprobs_equal_float64_reference(B, T, V, scale, seed, chunk, temp):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g) * scale
    labels = torch.randint(0, V, (B, T), generator=g)
    ref = (logits.double() / temp).log_softmax(-1)
    lp, ent = logprobs_and_entropy(logits, labels, chunk_size=chunk, temperature=temp)
    assert (lp.double() - ref.gather(-1, labels[..., None]).squeeze(-1)).abs().max() <= 2e-6 * max(1, scale)
    assert (ent.double() + (ref.exp() * ref).sum(-1)).abs().max() <= 5e-6 * max(1, scale)
    assert torch.equal(logprobs_from_logits(logits, labels, chunk_size=chunk, temperature=temp), lp)

@SET
@given(st.integers(1, 4), st.integers(1, 5), st.integers(2, 30), st.integers(0, 2**31 - 1))
def test_logprob_gradients_equal_autograd(B, T, V, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
    labels = torch.randint(0, V, (B, T), generator=g)
    a, b = torch.randn(B, T, generator=g, dtype=torch.float64), torch.randn(B, T, generator=g, dtype=torch.float64)
    z = logits.clone().requires_grad_()
    lp, ent = logprobs_and_entropy(z, labels, chunk_size=2)
    (a * lp + b * ent).sum().backward()
    z2 = logits.clone().requires_grad_()
    r = z2.log_softmax(-1)
    ((a * r.gather(-1, labels[..., None]).squeeze(-1)) + b * (-(r.exp() * r).sum(-1))).sum().backward()
    assert torch.allclose(z.grad, z2.grad, atol=1e-5)

@SET
@given(st.integers(1, 50), st.floats(-30, 0), st.integers(0, 2**31 - 1))
def test_k3_non_negative_and_finite(n, lo, seed):
    g = torch.Generator().manual_seed(seed)
    logp = torch.rand(n, generator=g) * lo; ref = torch.rand(n, generator=g) * lo
    for kind in KL_KINDS:
        k = kl_penalty(logp, ref, kind)
        assert torch.isfinite(k).all()
    assert (kl_penalty(logp, ref, "k3") >= 0).all() and (kl_penalty(logp, ref, "k2") >= 0).all()

def test_fully_masked_batch_is_zero_not_nan():
    x = torch.randn(3, 4); m = torch.zeros(3, 4, dtype=torch.bool)
    for mode in AGG_MODES: assert agg_loss(x, m, mode).item() == 0.0
    assert masked_mean(x, m).item() == 0.0
    with pytest.raises(ValueError, match="at least 2 unmasked"): masked_whiten(x, m)

def test_large_vocab_bf16_within_tolerance():
    torch.manual_seed(0)
    logits = (torch.randn(2, 3, 5000) * 4).bfloat16()
    labels = torch.randint(0, 5000, (2, 3))
    ref = logits.double().log_softmax(-1).gather(-1, labels[..., None]).squeeze(-1)
    assert (logprobs_from_logits(logits, labels).double() - ref).abs().max() < 2e-5


# ---------------------------------------------------------------- data parallel: the `reduce` hook

def whiten_across_ref(x, mask, red, eps=1e-8):
    "The RL trainer's `whiten_across` for W > 1 processes, restated (rl_notes.trainer before it called masked_whiten(reduce=))."
    m = mask.bool()
    n = red(m.sum().double())
    if n < 2: return x
    xd = x.double()
    mean = red(masked_sum(xd, m)) / n
    var = red(masked_sum((xd - mean) ** 2, m)) / (n - 1)
    w = ((xd - mean) * torch.rsqrt(var + eps)).to(x.dtype)
    return torch.where(m, w, torch.zeros_like(w))

@SET
@given(batch(min_b=1, max_b=7), st.integers(1, 4), st.sampled_from([torch.float32, torch.float64]), st.floats(-5, 5), st.floats(0.1, 50))
def test_whiten_reduce_equals_union_and_trainer(b, W, dtype, shift, scale):
    "W processes holding disjoint row sets = one process holding the union; and bit for bit what the trainer computed."
    x, mask, g = b
    x = (x * scale + shift).to(dtype)
    B = x.shape[0]
    cuts = sorted(torch.randint(0, B + 1, (W - 1,), generator=g).tolist())
    rows = list(zip([0] + cuts, cuts + [B]))                       # contiguous row ranges, some possibly empty
    ours = lockstep([lambda red, a=a, e=e: masked_whiten(x[a:e], mask[a:e], reduce=red) for a, e in rows])
    theirs = lockstep([lambda red, a=a, e=e: whiten_across_ref(x[a:e], mask[a:e], red) for a, e in rows])
    for o, t in zip(ours, theirs): assert torch.equal(o, t)
    whole = torch.cat(ours)
    if mask.sum() >= 2:
        ref = masked_whiten(x.double(), mask).to(dtype)
        assert torch.allclose(whole, ref, rtol=1e-5, atol=1e-5)
        if W == 1: assert torch.allclose(whole, masked_whiten(x, mask), rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(whole, x)                               # fewer than 2 tokens in all: unchanged

@SET
@given(batch(min_b=2))
def test_whiten_reduce_none_is_the_single_process_formula(b):
    x, mask, g = b
    if mask.sum() < 2: return
    for shift_mean in (True, False):
        m, v = masked_mean(x, mask), masked_var(x, mask)
        w = (x - m) * torch.rsqrt(v + 1e-8)
        if not shift_mean: w = w + m
        assert torch.equal(masked_whiten(x, mask, shift_mean=shift_mean), torch.where(mask, w, torch.zeros_like(w)))
        assert torch.equal(masked_whiten(x, mask, shift_mean=shift_mean, reduce=None), masked_whiten(x, mask, shift_mean=shift_mean))

def test_lockstep_propagates_errors_and_keeps_order():
    out = lockstep([lambda red, i=i: red(torch.tensor([float(i)])) + i for i in range(3)])
    assert [float(o) for o in out] == [3.0, 4.0, 5.0]
    def fail(red): raise KeyError("boom")
    with pytest.raises(KeyError, match="boom"): lockstep([lambda red: red(torch.ones(1)), fail])

def _dist_worker(rank, world, init_file, x, mask, out_dir):
    "One gloo process: whiten and explained variance over its half of the rows, with reduce = all_reduce(sum)."
    import torch.distributed as dist
    from rl_notes.ppo import explained_variance
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    def red(t):
        t = t.clone(); dist.all_reduce(t); return t
    rows = slice(rank * x.shape[0] // world, (rank + 1) * x.shape[0] // world)
    w = masked_whiten(x[rows], mask[rows], reduce=red)
    ev = explained_variance(x[rows] * 0.5, x[rows], mask[rows], reduce=red)
    torch.save({"w": w, "ev": ev}, f"{out_dir}/{rank}.pt")
    dist.destroy_process_group()

def test_reduce_hook_under_torch_distributed(tmp_path):
    "The same hook with a real all-reduce: 2 gloo processes on this machine equal one process holding all rows."
    import torch.multiprocessing as mp
    from rl_notes.ppo import explained_variance
    g = torch.Generator().manual_seed(0)
    x, mask = torch.randn(8, 6, generator=g) * 2 + 1, torch.rand(8, 6, generator=g) > 0.3
    mp.spawn(_dist_worker, args=(2, str(tmp_path / "init"), x, mask, str(tmp_path)), nprocs=2, join=True)
    res = [torch.load(tmp_path / f"{r}.pt") for r in range(2)]
    assert torch.allclose(torch.cat([r["w"] for r in res]), masked_whiten(x.double(), mask).float(), atol=1e-6)
    for r in res: assert torch.allclose(r["ev"], explained_variance(x * 0.5, x, mask), atol=1e-6)

# ---------------------------------------------------------------- edge cases

def test_agg_loss_empty_batch_is_zero_in_every_mode():
    for shape in ((0, 5), (3, 0), (0, 0)):
        for mode in AGG_MODES:
            z = torch.zeros(shape, requires_grad=True)
            out = agg_loss(z, torch.zeros(shape, dtype=torch.bool), mode)
            out.backward()
            assert out.item() == 0.0 and not math.isnan(out.item()) and z.grad.shape == shape
    with pytest.raises(ValueError, match="`max_tokens` must be > 0 and finite"): agg_loss(torch.ones(1, 2), torch.ones(1, 2), "seq-mean-token-sum-norm", max_tokens=math.inf)
    with pytest.raises(ValueError, match="`global_tokens` must be > 0 and finite"): agg_loss(torch.ones(1, 2), torch.ones(1, 2), global_tokens=math.nan)

@SET
@given(st.integers(1, 3), st.integers(1, 6), st.integers(2, 30), st.integers(0, 2**31 - 1), st.sampled_from([None, 1, 4]))
def test_logprobs_ignore_rows_with_nan_logits(B, T, V, seed, chunk):
    "Rows labelled ignore_index are ignored whatever their logits hold (NaN, inf); the other rows are unchanged."
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g)
    labels = torch.randint(0, V, (B, T), generator=g)
    ign = torch.rand(B, T, generator=g) < 0.4
    labels[ign] = -100
    poisoned = logits.clone(); poisoned[ign] = float('nan'); poisoned[ign.nonzero()[:1].unbind(-1)] = float('inf')
    z = poisoned.clone().requires_grad_()
    lp, ent = logprobs_and_entropy(z, labels, chunk_size=chunk)
    rlp, rent = logprobs_and_entropy(logits, labels, chunk_size=chunk)
    assert torch.equal(lp.detach(), rlp) and torch.equal(ent.detach()[~ign], rent[~ign]) and (ent.detach()[ign] == 0).all()
    (lp.sum() + ent.sum()).backward()
    assert torch.isfinite(z.grad).all() and (z.grad[ign] == 0).all()
    z2 = logits.clone().requires_grad_(); (logprobs_and_entropy(z2, labels, chunk_size=chunk)[0].sum() + logprobs_and_entropy(z2, labels, chunk_size=chunk)[1].sum()).backward()
    assert torch.allclose(z.grad[~ign], z2.grad[~ign], atol=1e-6)

def test_logprobs_out_of_range_labels_are_named():
    logits, labels = torch.randn(2, 3, 7), torch.zeros(2, 3, dtype=torch.long)
    for bad in (7, 100, -1, -99):
        lab = labels.clone(); lab[1, 2] = bad
        with pytest.raises(ValueError, match=rf"`labels` must lie in \[0, V\) = \[0, 7\) or equal `ignore_index`=-100, got {bad} at flattened position 5"):
            logprobs_from_logits(logits, lab)
    lab = labels.clone(); lab[0, 0] = 7
    assert logprobs_from_logits(logits, lab, ignore_index=7)[0, 0] == 0       # ignore_index may be any value


# ---- log-probs from the hidden states (the logits never built)
from rl_notes.core import logprobs_from_hidden

@SET
@given(st.integers(1, 4), st.integers(1, 7), st.integers(1, 12), st.integers(2, 60), st.integers(0, 2**31 - 1),
       st.sampled_from([None, 1, 3]), st.sampled_from([None, 1, 5, 64]), st.sampled_from([1.0, 0.6]), st.booleans())
def test_logprobs_from_hidden_equal_the_logits_path(B, T, H, V, seed, tc, vc, temp, bias):
    "Values and gradients (hidden, weight, bias) equal the logits path in float32 for every tiling, temperature and bias."
    g = torch.Generator().manual_seed(seed)
    h, W = torch.randn(B, T, H, generator=g), torch.randn(V, H, generator=g)
    b = torch.randn(V, generator=g) if bias else None
    lab = torch.randint(0, V, (B, T), generator=g)
    lab[torch.rand(B, T, generator=g) < 0.2] = -100
    a, c = torch.randn(B, T, generator=g, dtype=torch.float64), torch.randn(B, T, generator=g, dtype=torch.float64)
    def run(fn):
        xs = [x.clone().requires_grad_() for x in (h, W) + ((b,) if bias else ())]
        lp, ent = fn(*xs)
        ((a * lp.double()) + (c * ent.double())).sum().backward()
        return lp.detach(), ent.detach(), [x.grad for x in xs]
    lp1, e1, g1 = run(lambda h, W, *bb: logprobs_from_hidden(h, W, lab, bias=bb[0] if bb else None, temperature=temp, with_entropy=True,
                                                             token_chunk=tc, vocab_chunk=vc))
    lp2, e2, g2 = run(lambda h, W, *bb: logprobs_and_entropy(h @ W.t() + (bb[0] if bb else 0), lab, temperature=temp))
    scale = 1 + float(lp2.abs().max())
    assert float((lp1 - lp2).abs().max()) <= 1e-5 * scale and float((e1 - e2).abs().max()) <= 1e-5 * scale
    for x, y in zip(g1, g2): assert float((x - y).abs().max()) <= 1e-5 * (1 + float(y.abs().max()))
    assert float(lp1[lab == -100].abs().max() if (lab == -100).any() else 0.0) == 0.0


def test_logprobs_from_hidden_against_trl_chunked_kernel():
    "TRL 1.16's `ChunkedLogProbFunction` (its CPU path), called as it is, on the same tensors: log-probs, entropy and gradients."
    ChunkedLogProbFunction = pytest.importorskip("trl.kernels.chunked_logprob").ChunkedLogProbFunction
    g = torch.Generator().manual_seed(0)
    N, H, V = 37, 24, 301
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        h, W, b = torch.randn(N, H, generator=g).to(dtype), (torch.randn(V, H, generator=g) / 3).to(dtype), torch.randn(V, generator=g).to(dtype)
        lab = torch.randint(0, V, (N,), generator=g)
        gl, ge = torch.randn(N, generator=g), torch.randn(N, generator=g)
        x1 = [t.clone().requires_grad_() for t in (h, W, b)]
        lp, ent = logprobs_from_hidden(x1[0], x1[1], lab, bias=x1[2], temperature=0.8, with_entropy=True, vocab_chunk=64)
        (gl * lp + ge * ent).sum().backward()
        x2 = [t.clone().requires_grad_() for t in (h, W, b)]
        tlp, tent, *_ = ChunkedLogProbFunction.apply(x2[0], x2[1], x2[2], lab, 0.8, 64, None, 1.0, ("entropy",))
        (gl * tlp + ge * tent).sum().backward()
        assert float((lp - tlp).detach().abs().max()) <= tol * (1 + float(tlp.detach().abs().max())), dtype
        assert float((ent - tent).detach().abs().max()) <= tol * (1 + float(tent.detach().abs().max())), dtype
        for a_, b_ in zip(x1, x2):
            assert float((a_.grad.float() - b_.grad.float()).abs().max()) <= tol * (1 + float(b_.grad.float().abs().max())), dtype


def test_logprobs_from_hidden_in_the_trainer(micro_sft, tmp_path):
    "A GRPO run with `logprob_path='hidden'`: its first update (same weights, same samples) equals the logits path's to float tolerance."
    from rl_notes.trainconfig import TrainConfig
    from rl_notes.trainer import train
    kw = dict(model=micro_sft, task_kw=dict(max_digits=2, scratchpad=False), steps=2, n_prompts=4, group_size=4, max_new_tokens=3,
              n_train=200, n_eval=0, progress=False, algo="grpo")
    a = train(TrainConfig(out_dir=str(tmp_path / "logits"), logprob_path="logits", **kw))
    b = train(TrainConfig(out_dir=str(tmp_path / "hidden"), logprob_path="hidden", **kw))
    ra, rb = a[1], b[1]                       # step 1; later steps start from weights that Adam's sign-like first step moved apart
    assert ra["step"] == rb["step"] == 1 and ra["reward"] == rb["reward"]
    for k in ("loss", "entropy", "kl_ref", "grad_norm", "approx_kl"): assert abs(ra[k] - rb[k]) <= 1e-5 * (1 + abs(ra[k])), (k, ra[k], rb[k])
