"""Tests for rl_notes.grpo: cross-checks against TRL 1.16's GRPO code, and hypothesis properties.

Loss: TRL's GRPO loss lives in `GRPOTrainer._compute_loss` (a method that also runs the model). We call that method
itself, unmodified, on a stub `self` whose `_get_per_token_logps_and_entropies` returns given per-token log-probs;
old and reference log-probs are passed as precomputed inputs. So the check runs TRL's own loss code.

Advantages: TRL computes them inside `GRPOTrainer._generate_and_score_completions` (generation, reward calls and
normalisation in one method), which cannot be run without a model and reward functions. `_trl_advantages` below is a
minimal restatement of its `multi_objective_aggregation="sum_then_normalize"` branch (one reward function), calling
TRL's own `nanstd`; eps = 1e-4 as in TRL.
"""
import collections, math, types

import pytest
import torch
from hypothesis import given, settings, strategies as st

from rl_notes.core import agg_loss, kl_penalty, masked_mean
from rl_notes.grpo import group_advantages, grpo_loss, process_advantages
from rl_notes.ppo import ppo_policy_loss

grpo_mod = pytest.importorskip("trl.trainer.grpo_trainer")
from trl.trainer.utils import nanstd


def _trl_advantages(rewards, G, scale_rewards):
    "Restatement of TRL 1.16 GRPOTrainer._generate_and_score_completions, sum_then_normalize branch."
    mean_grouped = torch.nanmean(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
    if scale_rewards in ("group", "none"):
        std = nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
    else:  # "batch"
        std = nanstd(rewards).expand_as(rewards)
    adv = rewards - mean_grouped
    if scale_rewards != "none": adv = adv / (std + 1e-4)
    return torch.nan_to_num(adv, nan=0.0)


def trl_grpo_loss(logp, old_logp, ref_logp, adv, mask, loss_type, beta, eps_low, eps_high, max_completion_length=None):
    "Run TRL 1.16 `GRPOTrainer._compute_loss` on given per-token log-probs (single process, no accumulation)."
    B, T = logp.shape

    class _Acc:
        num_processes = 1
        sync_gradients = True
        def gather(self, x): return x
        def gather_for_metrics(self, x): return x
        def reduce(self, x, reduction="sum"): return x

    stub = types.SimpleNamespace(
        model=types.SimpleNamespace(training=True),
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token",
        beta=beta, loss_type=loss_type, epsilon_low=eps_low, epsilon_high=eps_high,
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        use_vllm=False, vllm_importance_sampling_correction=False, current_gradient_accumulation_steps=1,
        accelerator=_Acc(), _entropy_bonus_enabled=False, aux_loss_enabled=False,
        _metrics={"train": collections.defaultdict(list), "eval": collections.defaultdict(list)},
        max_completion_length=max_completion_length if max_completion_length is not None else T,
    )
    inputs = dict(prompt_ids=torch.zeros(B, 1, dtype=torch.long), prompt_mask=torch.ones(B, 1, dtype=torch.long),
                  completion_ids=torch.zeros(B, T, dtype=torch.long), completion_mask=mask.long(),
                  advantages=adv, old_per_token_logps=old_logp, ref_per_token_logps=ref_logp,
                  num_items_in_batch=mask.sum().float())
    return grpo_mod.GRPOTrainer._compute_loss(stub, None, inputs), stub._metrics["train"]


def _batch(seed, B=8, T=7, spread=0.4):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T) < lens[:, None]).long()
    logp = (-torch.rand(B, T, generator=g) * 3).requires_grad_()
    old_logp = logp.detach() + spread * torch.randn(B, T, generator=g)
    ref_logp = logp.detach() + spread * torch.randn(B, T, generator=g)
    rewards = torch.randint(0, 3, (B,), generator=g).float() / 2
    return logp, old_logp, ref_logp, rewards, mask


# ---------------------------------------------------------------------------------------------------- advantages
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.sampled_from([2, 3, 4, 8]), st.sampled_from(["group", "batch", "none"]),
       st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, -1.0, 2.0]), min_size=48, max_size=48))
def test_group_advantages_match_trl(n, G, scale, vals):
    rewards = torch.tensor(vals[: n * G])
    ours = group_advantages(rewards, G, scale=scale, eps=1e-4)
    theirs = _trl_advantages(rewards, G, scale)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.sampled_from([2, 4, 5]), st.floats(-100, 100, width=32), st.data())
def test_equal_groups_exactly_zero(n, G, c, data):
    "Groups of equal rewards (any float value) get exactly 0, and other groups are centred."
    rows = [torch.full((G,), c) if data.draw(st.booleans()) else
            torch.tensor(data.draw(st.lists(st.floats(-10, 10, width=32), min_size=G, max_size=G))) for _ in range(n)]
    rewards = torch.cat(rows)
    for scale in ("group", "batch", "none"):
        a = group_advantages(rewards, G, scale=scale).view(n, G)
        r = rewards.view(n, G)
        same = r.amax(-1) == r.amin(-1)
        assert (a[same] == 0).all()
        assert torch.allclose(a.mean(-1), torch.zeros(n), atol=1e-3 * (1 + a.abs().max().item()))


def test_group_advantages_bad_input():
    with pytest.raises(ValueError, match="group_size"): group_advantages(torch.ones(4), 1)
    with pytest.raises(ValueError, match="not a multiple"): group_advantages(torch.ones(5), 2)
    with pytest.raises(ValueError, match="scale"): group_advantages(torch.ones(4), 2, scale="max")


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.sampled_from([2, 3]), st.integers(2, 9), st.data())
def test_process_advantages_single_step_is_outcome(n, G, T, data):
    "One step ending at each response's last token reproduces the outcome advantage on every token."
    B = n * G
    lens = torch.tensor(data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B)))
    r = torch.tensor(data.draw(st.lists(st.sampled_from([0., 0.5, 1.]), min_size=B, max_size=B)))
    mask = (torch.arange(T) < lens[:, None]).long()
    pa = process_advantages(r[:, None], (lens - 1)[:, None], mask, G)
    torch.testing.assert_close(pa, group_advantages(r, G)[:, None] * mask, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------- loss vs TRL
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("eps", [(0.2, 0.2), (0.2, 0.28)])
@pytest.mark.parametrize("loss_type,agg", [("grpo", "seq-mean-token-mean"), ("dapo", "token-mean"),
                                           ("bnpo", "token-mean"), ("dr_grpo", "seq-mean-token-sum-norm")])
def test_grpo_loss_matches_trl(seed, beta, eps, loss_type, agg):
    logp, old_logp, ref_logp, rewards, mask = _batch(seed)
    adv = group_advantages(rewards, 4)
    T = logp.shape[1]
    ours, met = grpo_loss(logp, old_logp, ref_logp, adv, mask, eps_low=eps[0], eps_high=eps[1], beta=beta, agg=agg,
                          max_tokens=T + 3)
    theirs, tmet = trl_grpo_loss(logp, old_logp, ref_logp, adv, mask, loss_type, beta, eps[0], eps[1], max_completion_length=T + 3)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
    g1, = torch.autograd.grad(ours, logp)
    g2, = torch.autograd.grad(theirs, logp)
    torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-7)
    if beta: torch.testing.assert_close(met["kl"], torch.tensor(tmet["kl"][0]), rtol=1e-5, atol=1e-7)
    # TRL's clip_ratio/region_mean = share of tokens clipped in the advantage's direction
    torch.testing.assert_close(met["clipfrac_low"] + met["clipfrac_high"], torch.tensor(tmet["clip_ratio/region_mean"][0]),
                               rtol=1e-5, atol=1e-6)


def test_grpo_loss_per_token_process_advantages_match_trl():
    "TRL accepts (B, T) advantages too (it unsqueezes only (B,)); process-supervision advantages go through both."
    logp, old_logp, ref_logp, rewards, mask = _batch(7)
    B, T = logp.shape
    ends = (mask.sum(-1) - 1)[:, None]
    step_r = torch.stack([rewards, torch.rand(B)], -1)
    step_e = torch.cat([torch.zeros_like(ends), ends], -1)        # a first step ending at token 0, then the rest
    adv = process_advantages(step_r, step_e, mask, 4)
    ours, _ = grpo_loss(logp, old_logp, ref_logp, adv, mask)
    theirs, _ = trl_grpo_loss(logp, old_logp, ref_logp, adv, mask, "grpo", 0.04, 0.2, 0.2)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


@settings(max_examples=50, deadline=None)
@given(st.floats(-3, 3), st.floats(-2, 2), st.sampled_from([0.1, 0.2]), st.sampled_from([0.2, 0.28]))
def test_clipped_gradient_zero_past_bound(log_ratio, a, eps_low, eps_high):
    "G3 as a property: the surrogate's gradient vanishes iff the ratio is past the bound the advantage pushes towards."
    logp = torch.zeros(1, 1, requires_grad=True)
    loss, _ = grpo_loss(logp, torch.tensor([[-log_ratio]]), None, torch.tensor([a]), torch.ones(1, 1),
                        eps_low=eps_low, eps_high=eps_high, beta=0.0)
    g, = torch.autograd.grad(loss, logp)
    ratio = torch.tensor(log_ratio).exp().item()
    stuck = (a > 0 and ratio > 1 + eps_high) or (a < 0 and ratio < 1 - eps_low)
    if stuck: assert g.item() == 0.0
    else: assert abs(g.item() - (-a * ratio)) <= 1e-5 * (1 + abs(a * ratio))


# ---------------------------------------------------------------------------------------------------- what the trainer needs
def trainer_dual_clip_loss(logp, old, ref, adv, m, eps_low, eps_high, dual_clip, beta, kl, agg, max_tokens, gt):
    "The RL trainer's dual-clip branch, restated (rl_notes.trainer before it called grpo_loss(dual_clip=))."
    loss, pm = ppo_policy_loss(logp, old, adv, m, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip,
                               agg=agg, max_tokens=max_tokens, global_tokens=gt)
    if beta > 0:
        kl_mat = kl_penalty(logp, ref, kind=kl)
        loss = loss + beta * agg_loss(kl_mat, m, agg, max_tokens=max_tokens, global_tokens=gt)
        pm["kl"] = masked_mean(kl_mat.detach(), m)
    return loss, pm

@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10 ** 6), st.sampled_from([None, 1.5, 3.0]), st.sampled_from([0.0, 0.04]), st.sampled_from(["k1", "k2", "k3"]),
       st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]), st.booleans())
def test_grpo_loss_dual_clip_is_the_trainers_composition(seed, dual_clip, beta, kl, agg, use_gt):
    "grpo_loss(dual_clip=c) = the trainer's ppo_policy_loss(dual_clip=c) + beta * agg(kl), loss, gradient and metrics bit for bit."
    logp, old_logp, ref_logp, rewards, mask = _batch(seed, spread=0.8)
    adv = group_advantages(rewards, 4)
    m = mask.bool()
    gt = float(m.sum()) * 2 if use_gt and agg == "token-mean" else None
    kw = dict(eps_low=0.2, eps_high=0.28, max_tokens=9)
    ours, om = grpo_loss(logp, old_logp, ref_logp, adv, m, beta=beta, kl=kl, agg=agg, global_tokens=gt, dual_clip=dual_clip, **kw)
    theirs, tm = trainer_dual_clip_loss(logp, old_logp, ref_logp, adv, m, kw["eps_low"], kw["eps_high"], dual_clip, beta, kl, agg, 9, gt)
    assert torch.equal(ours, theirs)
    g1, = torch.autograd.grad(ours, logp); g2, = torch.autograd.grad(theirs, logp)
    assert torch.equal(g1, g2)
    for k in tm: assert torch.equal(torch.as_tensor(om[k]), torch.as_tensor(tm[k])), k
    if dual_clip is None:   # and None is the plain loss of before
        plain, _ = grpo_loss(logp, old_logp, ref_logp, adv, m, beta=beta, kl=kl, agg=agg, global_tokens=gt, **kw)
        assert torch.equal(ours, plain)

def test_grpo_loss_rejects_non_finite_beta():
    logp, old_logp, ref_logp, rewards, mask = _batch(0)
    for bad in (math.inf, math.nan, -1.0):
        with pytest.raises(ValueError, match="`beta` must be >= 0 and finite"): grpo_loss(logp, old_logp, ref_logp, rewards, mask, beta=bad)

@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.sampled_from([2, 4, 8]), st.integers(0, 126), st.integers(0, 10 ** 6), st.sampled_from(["group", "batch"]))
def test_group_advantages_scale_free_up_to_float32_max(n, G, k, seed, scale):
    "Rewards times 2^k (with eps times 2^k) give the same advantages bit for bit, up to rewards near float32's maximum."
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(n * G, generator=g)
    big = r * 2.0 ** k
    if not torch.isfinite(big).all(): return
    assert torch.equal(group_advantages(big, G, scale=scale, eps=1e-6 * 2.0 ** k), group_advantages(r, G, scale=scale, eps=1e-6))
    none = group_advantages(big, G, scale="none", eps=0.0) if torch.isfinite(big * 2).all() else None
    if none is not None: assert torch.equal(none, group_advantages(r, G, scale="none") * 2.0 ** k)

def test_group_advantages_huge_rewards_finite_and_correct():
    r = torch.tensor([1e38, 3e38, 2e38, 3.3e38, -3.4e38, 3.4e38, 0.0, 1.0])
    ref = lambda x: ((x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)).view(-1).float()
    a = group_advantages(r, 4)
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a, ref((r.double() / 2.0 ** 100).view(2, 4)), rtol=1e-5, atol=1e-6)
    f64 = torch.tensor([1e300, -1e300, 3e299, 5e299], dtype=torch.float64)
    torch.testing.assert_close(group_advantages(f64, 2), torch.tensor([0.7071068, -0.7071068, -0.7071068, 0.7071068]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="overflows float32"): group_advantages(torch.tensor([3.4e38, -3.4e38, -3.4e38, -3.4e38]), 4, scale="none")
    pa = process_advantages(r[:, None], torch.zeros(8, 1, dtype=torch.long), torch.ones(8, 1), 4)
    torch.testing.assert_close(pa[:, 0], a, rtol=1e-5, atol=1e-6)
