"""Tests for rl_notes.dapo: cross-checks against TRL 1.16 and hypothesis properties.

- Soft overlong punishment: TRL's `trl.rewards.get_soft_overlong_punishment` is standalone; we call it.
- DAPO loss: TRL's `GRPOTrainer._compute_loss` with `loss_type="dapo"` and `epsilon_high`, run unmodified on a stub
  `self` (see tests/test_grpo.py, `trl_grpo_loss`). Overlong filtering in TRL (`mask_truncated_completions=True`) is a
  line inside `_generate_and_score_completions`; we restate it: `completion_mask * (~is_truncated).unsqueeze(1)`,
  with `num_items_in_batch` the token count of the masked batch, as TRL computes it after masking.
"""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from rl_notes.core import agg_loss
from rl_notes.dapo import (dapo_loss, dynamic_sample, filter_groups, max_prob_after_clip, overlong_filter_mask,
                           soft_overlong_punishment)
from rl_notes.grpo import group_advantages, grpo_loss

pytest.importorskip("trl")
from trl.rewards import get_soft_overlong_punishment
from test_grpo import trl_grpo_loss, _batch


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 300), st.data())
def test_soft_overlong_matches_trl(max_len, data):
    cache = data.draw(st.integers(0, max_len))
    lengths = data.draw(st.lists(st.integers(0, 2 * max_len + 5), min_size=1, max_size=40))
    theirs = get_soft_overlong_punishment(max_completion_len=max_len, soft_punish_cache=cache)([[0] * l for l in lengths])
    ours = soft_overlong_punishment(torch.tensor(lengths), max_len, cache)
    torch.testing.assert_close(ours, torch.tensor(theirs, dtype=torch.float32), rtol=1e-6, atol=1e-7)
    assert ((ours <= 0) & (ours >= -1)).all()
    s = torch.tensor(lengths).argsort()                           # non-increasing in the length
    assert (ours[s].diff() <= 1e-7).all()


def test_soft_overlong_bad_input():
    with pytest.raises(ValueError, match="cache_len"): soft_overlong_punishment(torch.tensor([3]), 10, 11)
    with pytest.raises(ValueError, match="max_len"): soft_overlong_punishment(torch.tensor([3]), 0, 0)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("eps_high", [0.2, 0.28])
def test_dapo_loss_matches_trl(seed, eps_high):
    logp, old_logp, ref_logp, rewards, mask = _batch(seed, B=12, T=9)
    lens = mask.sum(-1)
    truncated = lens == mask.shape[1]
    adv = group_advantages(rewards + soft_overlong_punishment(lens, 9, 3), 4)
    ours, met = dapo_loss(logp, old_logp, adv, mask, truncated=truncated, eps_high=eps_high)
    trl_mask = mask * (~truncated).unsqueeze(1).int()              # TRL mask_truncated_completions
    theirs, _ = trl_grpo_loss(logp, old_logp, None, adv, trl_mask, "dapo", 0.0, 0.2, eps_high)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
    g1, = torch.autograd.grad(ours, logp); g2, = torch.autograd.grad(theirs, logp)
    torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-7)
    assert (g1[truncated] == 0).all()                              # truncated samples get no gradient


def test_dapo_bad_input():
    logp, old_logp, _, rewards, mask = _batch(0)
    with pytest.raises(ValueError, match="eps_low"): dapo_loss(logp, old_logp, rewards, mask, eps_low=0.3, eps_high=0.2)
    with pytest.raises(ValueError, match="not a multiple"): filter_groups(torch.ones(7), 2)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.sampled_from([2, 3, 4]), st.data())
def test_filter_groups_iff_nonzero_advantage(n, G, data):
    r = torch.tensor(data.draw(st.lists(st.sampled_from([0., 1.]), min_size=n * G, max_size=n * G)))
    keep = filter_groups(r, G)
    nz = group_advantages(r, G).view(n, G).ne(0).any(-1).repeat_interleave(G)
    assert torch.equal(keep, nz)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.sampled_from([2, 4]), st.floats(0.05, 0.95), st.integers(0, 10_000))
def test_dynamic_sample_properties(target, G, p, seed):
    g = torch.Generator().manual_seed(seed)
    def sample_fn(rnd):
        r = (torch.rand(3 * G, generator=g) < p).float()
        return r, {"rnd": torch.full((3 * G, 2), rnd), "i": list(range(3 * G))}
    try:
        r, b, st_ = dynamic_sample(sample_fn, target, G, max_rounds=50)
    except RuntimeError:
        return                                                     # the bound is allowed to bite for extreme p
    assert st_["full"] and r.numel() == target * G and b["rnd"].shape == (target * G, 2) and len(b["i"]) == target * G
    assert filter_groups(r, G).all()
    assert st_["gen_samples"] == st_["rounds"] * 3 * G and st_["gen_ratio"] >= 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=2, max_size=8), st.sampled_from([-1.0, 1.0]))
def test_token_weights(lens, a):
    "D4: dL/dlogp = -A * w with w = 1/(B|o_i|) (GRPO), 1/sum|o| (DAPO), 1/(B L_max) (Dr. GRPO)."
    B, T = len(lens), max(lens)
    L = torch.tensor(lens)
    mask = (torch.arange(T) < L[:, None]).long()
    exp = {"seq-mean-token-mean": (1 / (B * L.double()))[:, None].expand(B, T),
           "token-mean": torch.full((B, T), 1 / L.sum().double()),
           "seq-mean-token-sum-norm": torch.full((B, T), 1 / (B * (T + 5)))}
    for agg, w in exp.items():
        logp = torch.zeros(B, T, requires_grad=True)
        loss, _ = grpo_loss(logp, logp.detach(), None, torch.full((B,), a), mask, beta=0.0, agg=agg, max_tokens=T + 5)
        g, = torch.autograd.grad(loss, logp)
        torch.testing.assert_close(g.double(), (-a * w * mask).double(), rtol=1e-5, atol=1e-9)


def test_overlong_filter_and_clip_higher():
    m = torch.ones(3, 4, dtype=torch.long)
    assert overlong_filter_mask(torch.tensor([True, False, True]), m).sum(-1).tolist() == [0, 4, 0]
    p = torch.linspace(0, 1, 101)
    assert torch.allclose(max_prob_after_clip(p, 0.28), torch.minimum(p.double() * 1.28, torch.ones(101, dtype=torch.double)))
