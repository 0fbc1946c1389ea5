"""Stale-data corrections (rl_notes.offpolicy: M2PO's second-moment mask, DPPO's binary trust region) against the peers'
formulas, restated here from their sources: AReaL's one-pass M2PO (areal/trainer/ppo/actor.py: sort the per-token
(log r)^2 in decreasing order, mean of each suffix, first suffix under the budget), prime-rl's DPPO mask
(src/prime_rl/trainer/rl/loss.py: probs_diff = exp(trainer) - exp(inference), masked where advantages > 0 and
probs_diff > high, else where probs_diff < -low) and Stable-RL's binary KL (verl/trainer/ppo/core_algos.py, dppo_binary_kl)."""
import torch
from hypothesis import given, settings, strategies as st
from rl_notes.offpolicy import m2po_mask, dppo_mask, dppo_loss

def batch(seed, B=3, T=12, spread=0.5):
    g = torch.Generator().manual_seed(seed)
    mu = torch.log_softmax(torch.randn(B, T, 5, generator=g), -1)[..., 0]      # log mu of a sampled token
    lp = mu + torch.randn(B, T, generator=g) * spread
    mask = torch.rand(B, T, generator=g) > 0.2
    adv = torch.randn(B, generator=g)
    return lp.clamp(max=0.0), mu, mask, adv

def areal_m2po(lp, mu, mask, tau):
    "AReaL's rule as restated: sort, suffix means, the first below the budget (strict), one token kept at least."
    m2 = ((lp - mu) ** 2)[mask]
    srt, idx = torch.sort(m2, descending=True)
    n = len(srt); suf = srt.flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1)
    below = (suf < tau).nonzero()
    k = int(below[0]) if len(below) else n - 1
    keep = torch.ones(n, dtype=torch.bool); keep[idx[:k]] = False
    out = torch.zeros_like(mask); out[mask] = keep
    return out

@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.0, 0.01, 0.04, 0.1, 1.0]), st.floats(0.05, 2.0))
def test_m2po_matches_areal_and_keeps_the_budget(seed, tau, spread):
    lp, mu, mask, _ = batch(seed, spread=spread)
    keep, mt = m2po_mask(lp, mu, mask, tau)
    m2 = (lp - mu) ** 2
    assert not (keep & ~mask).any() and keep.sum() >= 1
    assert float(m2[keep].mean()) <= tau + 1e-6 or keep.sum() == 1
    if (mask & ~keep).any(): assert float(m2[mask & ~keep].min()) >= float(m2[keep].max()) - 1e-7
    ours, peer = keep, areal_m2po(lp, mu, mask, tau)
    # AReaL stops at a strict < where the paper's loop stops at <=: they differ only when a suffix mean equals the budget exactly
    assert torch.equal(ours, peer) or abs(float(m2[peer].mean()) - tau) < 1e-6 or abs(float(m2[ours].mean()) - tau) < 1e-6

@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.0, 0.5), st.floats(0.0, 0.5))
def test_dppo_tv_matches_prime_rl(seed, low, high):
    lp, mu, mask, adv = batch(seed)
    a = adv[:, None].expand_as(lp)
    diff = lp.exp() - mu.exp()
    invalid = torch.where(a > 0, diff > high, diff < -low)                                   # prime-rl's mask, restated
    assert torch.equal(dppo_mask(lp, mu, adv, mask, "binary_tv", low, high), mask & ~invalid)

@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.0, 0.2))
def test_dppo_kl_matches_stable_rl(seed, delta):
    lp, mu, mask, adv = batch(seed)
    a = adv[:, None].expand_as(lp)
    p, q = lp.exp().double(), mu.exp().double()
    kl = q * (q / p).log() + (1 - q) * ((1 - q) / (1 - p)).log()                           # KL(Bern(mu) || Bern(pi)), restated
    invalid = torch.where(a > 0, (p > q) & (kl > delta), (p < q) & (kl > delta))
    got = dppo_mask(lp, mu, adv, mask, "binary_kl", delta, delta)
    near = (kl - delta).abs() < 1e-6                                                        # float order at the bound
    assert torch.equal(got | near, (mask & ~invalid) | near)

def test_dppo_loss_gradient_is_the_capped_ratio_on_kept_tokens():
    lp, mu, mask, adv = batch(1)
    x = lp.clone().requires_grad_()
    loss, mt = dppo_loss(x, mu, adv, mask.float(), "binary_tv", 0.1, 0.1, ratio_cap=3.0)
    loss.backward()
    keep = dppo_mask(lp, mu, adv, mask, "binary_tv", 0.1, 0.1)
    want = -(adv[:, None] * (lp - mu).exp().clamp(max=3.0) * keep) / mask.sum()
    assert torch.allclose(x.grad, want, atol=1e-6) and 0 <= float(mt["dppo_masked"]) <= 1
