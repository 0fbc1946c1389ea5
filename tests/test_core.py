"Property-based tests for rl_notes.core (hypothesis)."
import math
import torch
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from rl_notes.core import (masked_sum, masked_mean, masked_var, masked_whiten, agg_loss, AGG_MODES,
                           logprobs_from_logits, logprobs_and_entropy, kl_penalty, KL_KINDS)

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
