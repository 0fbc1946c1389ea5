"""Property tests for rl_notes.vapo (no peer library implements VAPO's decoupled / length-adaptive GAE to cross-check
against; the checks are against rl_notes.ppo.gae_reference, the plain loop of the PPO notebook)."""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from rl_notes.core import agg_loss
from rl_notes.ppo import gae_reference
from rl_notes.vapo import decoupled_gae, length_adaptive_lambda, positive_lm_loss, value_pretrain


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=20), st.floats(1e-3, 1.0))
def test_length_adaptive_lambda_range_and_formula(lengths, alpha):
    lam = length_adaptive_lambda(torch.tensor(lengths), alpha)
    assert ((lam >= 0) & (lam <= 1)).all()
    for l, x in zip(lengths, lam.tolist()):
        raw = 1 - 1 / (alpha * l)
        assert abs(x - min(max(raw, 0.0), 1.0)) < 1e-6
        if alpha * l <= 1: assert x == 0.0                          # the formula is <= 0 below l = 1/alpha


def test_length_adaptive_lambda_bad_input():
    with pytest.raises(ValueError, match="alpha"): length_adaptive_lambda(torch.tensor([30]), -0.05)
    with pytest.raises(ValueError, match="lengths"): length_adaptive_lambda(torch.tensor([0]), 0.05)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 40), st.sampled_from([0.0, 0.5, 0.95, 1.0, "adaptive"]),
       st.sampled_from([0.9, 1.0]), st.floats(0.01, 0.2), st.integers(0, 1000))
def test_decoupled_gae_matches_reference(B, T, lam_actor, lam_critic, alpha, seed):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, T + 1, (B,), generator=g)
    mask = (torch.arange(T) < lens[:, None]).long()
    rewards, values = torch.randn(B, T, generator=g, dtype=torch.float64), torch.randn(B, T, generator=g, dtype=torch.float64)
    adv, ret = decoupled_gae(rewards, values, mask, lam_critic=lam_critic, lam_actor=lam_actor, alpha=alpha)
    lam_a = length_adaptive_lambda(lens.clamp(min=1), alpha).double() if lam_actor == "adaptive" else lam_actor
    for i in range(B):
        la = float(lam_a[i]) if torch.is_tensor(lam_a) else lam_a
        a_ref, _ = gae_reference(rewards[i:i+1], values[i:i+1], mask[i:i+1], lam=la)
        _, r_ref = gae_reference(rewards[i:i+1], values[i:i+1], mask[i:i+1], lam=lam_critic)
        torch.testing.assert_close(adv[i:i+1], a_ref, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ret[i:i+1], r_ref, rtol=1e-6, atol=1e-6)


def test_positive_lm_loss_only_positive_rows():
    logp = torch.randn(4, 5).requires_grad_()
    mask = torch.ones(4, 5)
    pos = torch.tensor([True, False, False, True])
    loss, m = positive_lm_loss(logp, mask, pos, mu=0.1)
    torch.testing.assert_close(loss, -0.1 * logp[pos].mean())
    loss.backward()
    assert (logp.grad[~pos] == 0).all()


def test_value_pretrain_fits_constant_returns():
    "A critic with one parameter per position learns the mean return of a Bernoulli(0.3) outcome."
    w = torch.nn.Parameter(torch.zeros(6))
    g = torch.Generator().manual_seed(0)
    def sample_fn(step):
        r = torch.zeros(256, 6); r[:, -1] = (torch.rand(256, generator=g) < 0.3).float()
        return dict(rewards=r, mask=torch.ones(256, 6))
    out = value_pretrain(lambda b: w.expand(256, 6), torch.optim.Adam([w], lr=0.05), sample_fn,
                         max_steps=500, loss_threshold=0.3 * 0.7 * 1.05, ev_threshold=None, window=20)
    assert out["converged"] and out["steps"] < 500
    assert torch.allclose(w.detach(), torch.full((6,), 0.3), atol=0.08)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 7), st.integers(1, 3), st.floats(0.0, 1.0), st.integers(0, 10 ** 6))
def test_positive_lm_loss_is_the_trainers_term(B, T, W, p_pos, seed):
    "mu * NLL with global_tokens = the trainer's lm_coef * agg_loss(-logp, pos, 'token-mean', global_tokens=n_pos), bit for bit;"
    "W processes' losses add up to the loss of the whole batch."
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(W * B, T, generator=g) * 3).requires_grad_()
    mask = torch.rand(W * B, T, generator=g) > 0.3
    correct = torch.rand(W * B, generator=g) < p_pos
    pos = mask & correct[:, None]
    n_pos = float(pos.sum())
    total = 0.0
    for w in range(W):
        rows = slice(w * B, (w + 1) * B)
        ours, met = positive_lm_loss(logp[rows], mask[rows], correct[rows], mu=0.1, global_tokens=n_pos)
        if n_pos > 0:   # the trainer adds the term only when some process has a positive token
            lm = agg_loss(-logp[rows], pos[rows], "token-mean", global_tokens=n_pos)
            assert torch.equal(ours, 0.1 * lm) and torch.equal(met["nll"], lm.detach())
        else:
            assert ours.item() == 0.0
        total = total + ours
    whole, _ = positive_lm_loss(logp, mask, correct, mu=0.1)
    torch.testing.assert_close(total, whole, rtol=1e-5, atol=1e-7)
    total.backward()
    assert (logp.grad[~pos] == 0).all() and torch.isfinite(logp.grad).all()

def test_positive_lm_loss_bad_global_tokens():
    logp, mask = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="`global_tokens` is 0 but this process has 3 positive"): positive_lm_loss(logp, mask, torch.tensor([True, False]), global_tokens=0)
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="`global_tokens` must be a finite count >= 0"): positive_lm_loss(logp, mask, torch.tensor([True, False]), global_tokens=bad)
    assert positive_lm_loss(logp, mask, torch.tensor([False, False]), global_tokens=0)[0].item() == 0.0
