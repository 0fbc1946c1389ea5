"""rl_notes.offpolicy.gate: its properties under hypothesis, the trainer's corrections through it, and three peers' gates.

The peers are not installed; their computations are restated below from the files named, at the commits named, as the
code there computes them (formulas carried over, not the code):

* OpenRLHF v0.11.0, commit 3c3be6234e0cb353e76bb8019947db9dfe99fca7: `openrlhf/models/loss.py` lines 196-218
  (`PolicyLoss.forward`, the `vllm_is_correction_type` branches tis / icepop / seq-mask-tis), its `masked_mean` in
  `openrlhf/models/utils.py` lines 166-169, and the defaults in `openrlhf/cli/train_ppo_ray.py` lines 257-271
  (type "tis", threshold [0.5, 5.0]).
* AReaL v1.0.4, commit 37d6c6400e99a05fa3409d6a067762a44df40d3b: `areal/utils/functional/functional.py` lines 165-425
  (`_check_bounds`, `apply_rejection_sampling`, its 2-D padded branch), `areal/utils/data.py` lines 1620-1656
  (`KLEstimator._compute_approx_kl`: k1 = log r, k2 = (log r)^2 / 2, k3 = 1/r - 1 + log r), and the defaults and the
  clamp's lower bound 0 in `areal/api/cli_args.py` lines 1224-1385 (`RejectionSamplingConfig`).
* prime-rl, commit 559b44772e471d1538537b8805cc77f3824a5e64: `src/prime_rl/trainer/rl/loss.py` lines 164-196
  (`ipo_loss_fn`) and `packages/prime-rl-configs/src/prime_rl/configs/trainer.py` lines 510-518 (`IPOLossConfig`,
  `ipo_threshold` 0.1, `kl_tau` 1e-3).
"""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from rl_notes.core import masked_mean
from rl_notes.family import tis_weights
from rl_notes.offpolicy import (GATE_AGGS, GATE_METRICS, GATE_PRESETS, GATE_READS_ADV, gate, opsm_mask, rejection_mask,
                                token_divergence)
from rl_notes.losses import Tokens, algo_gates, modify_tokens
from rl_notes.trainconfig import get_algo

torch.set_num_threads(1)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _batch(seed=0, B=6, T=10, spread=0.3):
    "log pi_old (learner), log mu (sampler: the learner's minus N(0, spread^2), at most -1e-4), advantages (B,), a ragged bool mask."
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(B, T, generator=g) * 3 - 1e-3
    mu = (lp - spread * torch.randn(B, T, generator=g)).clamp(max=-1e-4)
    adv = torch.randn(B, generator=g)
    mask = torch.arange(T)[None] < torch.randint(1, T + 1, (B,), generator=g)[:, None]
    return lp, mu, adv, mask


def _adv(name, adv): return adv if name in GATE_READS_ADV else None


# ---- properties

@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000), st.sampled_from(sorted(GATE_PRESETS)))
def test_every_preset_is_the_identity_on_policy(B, T, seed, name):
    lp, _, adv, mask = _batch(seed, B, T)
    w, met = gate(lp, lp, mask, adv=_adv(name, adv), **GATE_PRESETS[name])
    assert torch.equal(w, mask.float())                                 # exactly 1 on the response tokens, 0 elsewhere
    assert float(met["kept"]) == (1.0 if mask.any() else 0.0) and float(met["truncated"]) == 0.0


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000), st.sampled_from(["token", "sequence"]),
       st.sampled_from(["truncate", "mask", "reject"]), st.sampled_from(GATE_METRICS), st.sampled_from(GATE_AGGS),
       st.floats(0.0, 1.0), st.floats(1.0, 10.0), st.floats(-1.0, 0.0), st.floats(0.0, 2.0))
def test_any_band_around_the_on_policy_value_is_the_identity_on_policy(B, T, seed, level, action, metric, agg, rlo, rhi, dlo, dhi):
    if action == "truncate" and (metric != "ratio" or (level == "sequence" and agg == "max")): return
    lp, _, _, mask = _batch(seed, B, T)
    lo, hi = (rlo, rhi) if metric == "ratio" else (dlo, dhi)           # the band holds the on-policy value: ratio 1, divergence 0
    w, _ = gate(lp, lp, mask, level=level, action=action, metric=metric, agg=agg, low=lo, high=hi)
    assert torch.equal(w, mask.float())


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000), st.floats(0.05, 1.0), st.sampled_from(["token", "sequence"]),
       st.sampled_from(["mask", "reject"]), st.sampled_from(GATE_METRICS), st.sampled_from(GATE_AGGS),
       st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 3.0), st.floats(0.0, 3.0))
def test_a_wider_band_keeps_a_superset(B, T, seed, spread, level, action, metric, agg, a, a2, b, b2):
    lp, mu, _, mask = _batch(seed, B, T, spread)
    if metric == "ratio": lo, hi, lo2, hi2 = a, 1 + b, a * a2, 1 + b + b2   # [lo, hi] inside [lo2, hi2]
    else: lo, hi, lo2, hi2 = -a, b, -a - a2, b + b2
    kw = dict(level=level, action=action, metric=metric, agg=agg)
    narrow, wide = gate(lp, mu, mask, low=lo, high=hi, **kw).weights, gate(lp, mu, mask, low=lo2, high=hi2, **kw).weights
    assert not ((narrow > 0) & ~(wide > 0)).any()
    assert not ((gate(lp, mu, mask, high=hi, **kw).weights > 0) & ~(gate(lp, mu, mask, **kw).weights > 0)).any()   # one end open


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000), st.floats(0.05, 2.0), st.sampled_from(["token", "sequence"]),
       st.sampled_from(["sum", "mean"]), st.one_of(st.none(), st.floats(0.0, 1.0)), st.floats(0.1, 10.0))
def test_truncate_weights_lie_between_the_bounds(B, T, seed, spread, level, agg, low, cap):
    lp, mu, _, mask = _batch(seed, B, T, spread)
    if low is not None and low > cap: low = cap
    w, met = gate(lp, mu, mask, level=level, action="truncate", agg=agg, low=low, high=cap)
    assert (w[mask] <= cap).all() and (w[~mask] == 0).all() and (low is None or (w[mask] >= low).all())
    rho = gate(lp, mu, mask, level=level, action="truncate", agg=agg).weights          # no bounds: the ratio itself
    assert torch.equal(w[mask], rho[mask].clamp(low, cap))
    assert math.isclose(float(met["truncated"]), float(((w != rho) & mask).sum() / mask.sum().clamp(min=1)), abs_tol=1e-6)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000), st.floats(0.05, 2.0), st.sampled_from(GATE_METRICS),
       st.floats(0.0, 2.0))
def test_mask_keeps_the_ratio_and_reject_keeps_one(B, T, seed, spread, metric, b):
    lp, mu, _, mask = _batch(seed, B, T, spread)
    hi = 1 + b if metric == "ratio" else b
    wm = gate(lp, mu, mask, action="mask", metric=metric, high=hi).weights
    wr = gate(lp, mu, mask, action="reject", metric=metric, high=hi).weights
    kept = wm > 0
    assert torch.equal(wm[kept], (lp - mu).exp()[kept]) and set(wr.unique().tolist()) <= {0.0, 1.0}
    if metric != "ratio": assert torch.equal(kept, wr > 0)        # the same band (the ratio: compared on w by mask, on log w by reject)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000), st.floats(0.0, 0.5))
def test_the_advantage_only_gates_the_negative_samples(B, T, seed, delta):
    lp, mu, adv, mask = _batch(seed, B, T, 0.5)
    kw = dict(level="sequence", action="reject", metric="k1", agg="mean", high=delta)
    with_a, without = gate(lp, mu, mask, adv=adv, **kw).weights, gate(lp, mu, mask, **kw).weights
    assert torch.equal(with_a[adv >= 0], mask[adv >= 0].float()) and torch.equal(with_a[adv < 0], without[adv < 0])
    assert torch.equal(with_a, opsm_mask(lp, mu, adv, mask, delta).float())


def test_the_binary_divergences_bound_the_full_ones():
    g = torch.Generator().manual_seed(0)
    l_mu = torch.randn(256, 30, generator=g).log_softmax(-1)
    l_pi = (l_mu + torch.randn(256, 30, generator=g)).log_softmax(-1)
    y = torch.multinomial(l_mu.exp(), 1, generator=g)
    lq, lp = l_mu.gather(-1, y), l_pi.gather(-1, y)
    one = torch.ones_like(lq, dtype=torch.bool)
    kl = (l_mu.exp() * (l_mu - l_pi)).sum(-1, keepdim=True)
    tv = 0.5 * (l_mu.exp() - l_pi.exp()).abs().sum(-1, keepdim=True)
    bkl, btv = token_divergence(lp, lq, one, "bkl"), token_divergence(lp, lq, one, "tv")
    assert (bkl <= kl + 1e-6).all() and (btv <= tv + 1e-6).all() and (btv <= (bkl / 2).sqrt() + 1e-6).all()
    # the binary KL is the KL of the two Bernoullis, in float64
    p, q = lp.double().exp(), lq.double().exp()
    torch.testing.assert_close(bkl.double(), q * (q / p).log() + (1 - q) * ((1 - q) / (1 - p)).log(), rtol=1e-5, atol=1e-7)


# ---- the trainer's corrections, through the gate, compute what the functions they replaced computed

def _old_modifiers(algo, t):
    "The advantages after tis, rs and opsm as `rl_notes.losses` computed them before `gate`: the functions of 15_family and 16_offpolicy."
    adv = t.adv[:, None].expand(t.mask.shape) if t.adv.dim() == 1 else t.adv
    if algo.tis is not None:
        level, mode = algo.tis.split("_")
        adv = adv * tis_weights(t.old_logp, t.rollout_logp, t.mask, level=level, mode=mode, c_max=algo.tis_c_max, c_min=algo.tis_c_min)
    if algo.rs is not None:
        adv = adv * rejection_mask(t.old_logp, t.rollout_logp, t.mask, level=algo.rs, low=algo.rs_low, high=algo.rs_high).to(adv.dtype)
    if algo.opsm_delta is not None:
        a = masked_mean(adv, t.mask, dim=-1) if (algo.tis is not None or algo.rs is not None) else t.adv
        adv = adv * opsm_mask(t.old_logp, t.rollout_logp, a, t.mask, delta=algo.opsm_delta).to(adv.dtype)
    return adv


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000), st.floats(0.05, 1.0),
       st.sampled_from([None, "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]),
       st.sampled_from([None, 1.5, 2.0, 5.0]), st.sampled_from([None, 0.5, 0.9]),
       st.sampled_from([None, "token", "sequence", "geometric"]), st.floats(0.2, 1.0), st.floats(1.0, 5.0),
       st.sampled_from([None, 0.0, 0.05, 0.3]))
def test_tis_rs_opsm_through_the_gate_are_unchanged(B, T, seed, spread, tis, c_max, c_min, rs, rs_low, rs_high, opsm):
    lp, mu, adv, mask = _batch(seed, B, T, spread)
    algo = get_algo("grpo", tis=tis, tis_c_max=c_max, tis_c_min=c_min, rs=rs, rs_low=rs_low, rs_high=rs_high, opsm_delta=opsm)
    t = Tokens(lp, lp, mu, torch.rand(B, T), adv, mask)
    got, keep = modify_tokens(algo, t)
    assert keep is None
    if tis is None and rs is None and opsm is None: assert got is adv
    else: assert torch.equal(got, _old_modifiers(algo, t))


def test_a_named_gate_in_the_trainer_is_its_preset():
    lp, mu, adv, mask = _batch(3, 8, 12, 0.4)
    t = Tokens(lp, lp, mu, torch.rand(8, 12), adv, mask)
    for name, kw in GATE_PRESETS.items():
        got, _ = modify_tokens(get_algo("grpo", gate=name), t)
        assert torch.equal(got, adv[:, None] * gate(lp, mu, mask, adv=_adv(name, adv), **kw).weights), name
    got, _ = modify_tokens(get_algo("grpo", gate="ipo", gate_high=0.3), t)
    assert torch.equal(got, adv[:, None] * gate(lp, mu, mask, **{**GATE_PRESETS["ipo"], "high": 0.3}).weights)
    assert algo_gates(get_algo("grpo", gate="areal_default", gate_low=0.2))["gate"] == {**GATE_PRESETS["areal_default"], "low": 0.2}


# ---- OpenRLHF v0.11.0

def _openrlhf_masked_mean(t, m, dim): return (t * m).sum(dim=dim) / m.sum(dim=dim)


def _openrlhf_is(old_log_probs, rollout_log_probs, action_mask, kind, low, high):
    "The factor OpenRLHF's PolicyLoss multiplies the per-token PPO loss by (loss.py 196-218), for each vllm_is_correction_type."
    rollout_log_ratio = old_log_probs - rollout_log_probs
    if kind == "icepop":
        vllm_is = torch.exp(rollout_log_ratio)
        return vllm_is * ((vllm_is >= low) & (vllm_is <= high))
    if kind == "seq-mask-tis":
        seq_is = torch.exp(_openrlhf_masked_mean(rollout_log_ratio, action_mask, -1))
        return ((seq_is >= low) & (seq_is <= high)).unsqueeze(-1) * torch.exp(rollout_log_ratio)
    return torch.exp(rollout_log_ratio).clamp(min=low, max=high)


@pytest.mark.parametrize("kind", ["tis", "icepop", "seq-mask-tis"])
@pytest.mark.parametrize("band", [(0.5, 5.0), (0.8, 1.25), (0.95, 1.05)])
@pytest.mark.parametrize("seed", range(3))
def test_openrlhf_corrections(kind, band, seed):
    lp, mu, _, mask = _batch(seed, 16, 20, 0.4)
    theirs = _openrlhf_is(lp, mu, mask.float(), kind, *band)            # OpenRLHF multiplies by action_mask later
    lo, hi = band
    if kind == "tis": ours = gate(lp, mu, mask, action="truncate", low=lo, high=hi).weights
    elif kind == "icepop": ours = gate(lp, mu, mask, action="mask", low=lo, high=hi).weights
    else:   # a geometric-mean decision times the unclipped token ratio
        keep = gate(lp, mu, mask, level="sequence", action="mask", agg="mean", low=lo, high=hi).weights > 0
        ours = keep * gate(lp, mu, mask).weights
    assert torch.equal(ours[mask], theirs[mask]) and (ours[~mask] == 0).all()
    if band == (0.95, 1.05): assert 0 < int(((theirs != torch.exp(lp - mu)) & mask).sum()) < int(mask.sum())   # the band acts


def test_openrlhf_default_is_its_tis():
    lp, mu, _, mask = _batch(7, 16, 20, 0.8)
    assert torch.equal(gate(lp, mu, mask, **GATE_PRESETS["openrlhf_default"]).weights[mask], _openrlhf_is(lp, mu, mask.float(), "tis", 0.5, 5.0)[mask])


# ---- AReaL v1.0.4

def _areal_kl(log_probs, log_probs_base, kl_estimator):
    "KLEstimator._compute_approx_kl with apply_clamp=False (data.py 1620-1656)."
    log_ratio = log_probs.float() - log_probs_base.float()
    if kl_estimator == "k2": return log_ratio ** 2 / 2.0
    if kl_estimator == "k3": return (-log_ratio).exp() - 1 - (-log_ratio)
    return log_ratio


def _areal_rejection(prox, behave, loss_mask, level="token", action="mask", metric="ratio", agg="mean", upper=5.0, lower=None):
    "apply_rejection_sampling on 2-D padded tensors (functional.py 183-425): the updated loss mask and behave_imp_weight."
    if action == "clamp" and lower is None: lower = 0.0                    # RejectionSamplingConfig.__post_init__
    check = (lambda v: (v >= lower) & (v <= upper)) if lower is not None else (lambda v: v <= upper)   # _check_bounds
    log_ratio = prox.detach().float() - behave.detach().float()
    log_ratio = torch.where(torch.isfinite(log_ratio), log_ratio, 0.0)
    metric_v = torch.exp(log_ratio) if metric == "ratio" else _areal_kl(prox, behave, metric.replace("kl_", ""))
    w = torch.exp(log_ratio)
    if level == "sequence":
        use_log = metric == "ratio"
        values = log_ratio if use_log else metric_v
        masked = torch.where(loss_mask.bool(), values, 0.0)
        count = loss_mask.sum(dim=-1, keepdim=True).clamp(min=1)
        if use_log: w = torch.exp(masked.sum(dim=-1, keepdim=True) / count).expand_as(log_ratio)
        if agg == "sum": seq = masked.sum(dim=-1, keepdim=True)
        elif agg == "mean": seq = masked.sum(dim=-1, keepdim=True) / count
        else:
            seq = values.masked_fill(~loss_mask.bool(), float("-inf")).max(dim=-1, keepdim=True)[0]
            seq = torch.where(loss_mask.sum(dim=-1, keepdim=True) == 0, torch.zeros_like(seq), seq)
        seq_metric = torch.exp(seq) if use_log else seq
        if action == "mask": inside = check(seq_metric).expand_as(loss_mask)
        else: w = torch.where((~check(seq_metric)).expand_as(loss_mask), w.clamp(min=lower if lower is not None else 0.0, max=upper), w)
    elif action == "mask": inside = check(metric_v)
    else: w = w.clamp(min=lower if lower is not None else 0.0, max=upper)
    updated = loss_mask & inside if action == "mask" else loss_mask
    return updated, torch.where(updated.bool(), w, 0.0)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("action", ["mask", "clamp"])
@pytest.mark.parametrize("band", [(None, 5.0), (0.5, 2.0), (0.8, 1.25), (0.95, 1.05)])
def test_areal_ratio_token_and_geometric(seed, action, band):
    lp, mu, _, mask = _batch(seed, 16, 20, 0.4)
    lower, upper = band
    ours_action = "mask" if action == "mask" else "truncate"
    for level, agg in (("token", "mean"), ("sequence", "mean")):
        keep, w = _areal_rejection(lp, mu, mask, level, action, "ratio", agg, upper, lower)
        ours = gate(lp, mu, mask, level=level, action=ours_action, agg=agg, low=lower, high=upper).weights
        assert torch.equal(ours, w), (level, action, band)
        if action == "mask": assert torch.equal(ours > 0, keep)
        if band == (0.95, 1.05): assert not torch.equal(w[mask], torch.exp(lp - mu)[mask])                       # the band acts


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("agg", ["sum", "max"])
def test_areal_ratio_sum_and_max_decide_alike_and_weigh_differently(seed, agg):
    "Sum and max on the ratio: the same responses kept; AReaL weights them by the geometric mean, the gate by the product (sum) or the token ratio (max)."
    lp, mu, _, mask = _batch(seed, 16, 20, 0.3)
    keep, _ = _areal_rejection(lp, mu, mask, "sequence", "mask", "ratio", agg, upper=2.0, lower=0.5)
    ours = gate(lp, mu, mask, level="sequence", action="mask", agg=agg, low=0.5, high=2.0).weights
    assert torch.equal(ours > 0, keep)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("level,agg", [("token", "mean"), ("sequence", "sum"), ("sequence", "mean"), ("sequence", "max")])
@pytest.mark.parametrize("metric,upper,lower", [("kl_k1", 0.2, -0.2), ("kl_k1", 0.1, None), ("kl_k2", 0.05, None), ("kl_k3", 0.05, None),
                                                ("kl_k3", 0.2, 0.001)])
def test_areal_kl_metrics(seed, level, agg, metric, upper, lower):
    lp, mu, _, mask = _batch(seed, 16, 20, 0.4)
    keep, w = _areal_rejection(lp, mu, mask, level, "mask", metric, agg, upper, lower)
    ratio = gate(lp, mu, mask).weights                                         # the token ratio that AReaL keeps
    if metric == "kl_k1":          # AReaL's k1 is log r = -k1 here: the band flips (its max would be the min here: not compared)
        if agg == "max": return
        ours = gate(lp, mu, mask, level=level, action="mask", metric="k1", agg=agg, low=-upper, high=None if lower is None else -lower).weights
        assert torch.equal(ours, w)
    elif metric == "kl_k2":
        ours = gate(lp, mu, mask, level=level, action="mask", metric="k2", agg=agg, low=lower, high=upper).weights
        assert torch.equal(ours, w)
    else:                          # AReaL's k3 is 1/r - 1 + log r: k3 here with the two policies swapped (expm1 here, exp - 1 there)
        kept = gate(mu, lp, mask, level=level, action="reject", metric="k3", agg=agg, low=lower, high=upper).weights
        assert torch.equal(kept.bool(), keep)
        assert torch.equal(kept * ratio, w)


def test_areal_default_is_its_rejection_sampling_config():
    lp, mu, _, mask = _batch(11, 16, 20, 1.0)
    keep, w = _areal_rejection(lp, mu, mask)                                  # RejectionSamplingConfig() when configured
    assert torch.equal(gate(lp, mu, mask, **GATE_PRESETS["areal_default"]).weights, w) and not keep.equal(mask)


# ---- prime-rl

def _prime_ipo(trainer_logprobs, inference_logprobs, loss_mask, advantages, ipo_threshold=0.1, adv_tau=1.0, kl_tau=1e-3):
    "ipo_loss_fn (loss.py 164-196) on one sample: the summed per-token loss and the tokens kept in the policy-gradient term."
    log_importance_ratio = trainer_logprobs - inference_logprobs
    importance_ratio = torch.exp(log_importance_ratio)
    is_masked = torch.abs(torch.exp(trainer_logprobs) - torch.exp(inference_logprobs)) > ipo_threshold
    keep_mask = loss_mask & ~is_masked
    pg_loss = keep_mask * (adv_tau * advantages) * importance_ratio
    kl_loss = loss_mask * log_importance_ratio ** 2
    return (-pg_loss + kl_tau * kl_loss).sum(), keep_mask


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("threshold", [0.1, 0.05, 0.3])
def test_prime_rl_ipo_mask_and_gradient(seed, threshold):
    lp, mu, adv, mask = _batch(seed, 12, 16, 0.6)
    a = adv[:, None].expand(mask.shape)
    w = gate(lp, mu, mask, **{**GATE_PRESETS["ipo"], "high": threshold}).weights
    theta = lp.clone().requires_grad_()                                        # the trainer's log-probs; at theta = pi_old
    loss, keep = _prime_ipo(theta, mu, mask, a, threshold, kl_tau=0.0)        # the KL term is a loss term, not part of a gate
    assert torch.equal(w > 0, keep)
    (g_theirs,) = torch.autograd.grad(loss, theta)
    # rl_notes: the gate's weight on the advantage of a ratio pi_theta / pi_old (1 at theta = pi_old, so never clipped)
    theta2 = lp.clone().requires_grad_()
    ours = -(w * a * torch.exp(theta2 - lp)).sum()
    (g_ours,) = torch.autograd.grad(ours, theta2)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-6, atol=1e-7)
    if threshold == 0.1: assert torch.equal(gate(lp, mu, mask, **GATE_PRESETS["ipo"]).weights, w)   # the preset: IPOLossConfig's default


def test_trainer_logs_the_gates_metrics(micro_sft, tmp_path):
    "A run with a sampler one update behind, token TIS and the IcePop gate: each step's row holds both gates' metrics (`<modifier>/<metric>`), in range; micro-batches log them too; the doctor's reader knows them."
    from rl_notes.trainer import train
    from rl_notes.trainconfig import TrainConfig
    from rl_notes.runlogs import read_log, to_series, KNOWN_UNUSED
    kw = dict(model=micro_sft, task_kw=dict(max_digits=2, scratchpad=False), steps=3, n_prompts=4, group_size=4, max_new_tokens=3,
              n_train=500, n_eval=0, progress=False, threads=1, sampler_lag=1,
              algo=get_algo("grpo", beta=0.0, tis="token_truncate", tis_c_max=1.01, gate="icepop"))
    for name, extra in (("whole", {}), ("micro", dict(micro_batch_size=3))):
        rows = train(TrainConfig(out_dir=str(tmp_path / name), **kw, **extra))
        assert [r["step"] for r in rows] == [0, 1, 2, 3]                          # step 0: the start's row, no update
        for r in rows[1:]:
            for m in ("tis", "gate"):
                assert 0 <= r[f"{m}/kept"] <= 1 and 0 <= r[f"{m}/truncated"] <= 1 and r[f"{m}/weight_mean"] >= 0, (name, r)
            assert r["tis/kept"] == 1.0 and r["tis/metric_max"] >= 1.0 - 1e-6     # truncation keeps every token; the largest ratio seen
    source, raw, _ = read_log(tmp_path / "whole")
    _, unmapped = to_series(raw, source)
    assert {"tis/truncated", "gate/kept"} <= set(unmapped)                       # no check reads them: known, not unknown
    assert all(KNOWN_UNUSED[source].match(k) for k in unmapped if k.startswith(("tis/", "gate/")))
