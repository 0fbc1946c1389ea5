"""rl_notes.offpolicy against TRL 1.16's code and verl's formulas, and its properties under hypothesis.

TRL: `GRPOTrainer.get_off_policy_mask` and `SyncRefModelCallback._sync_target_model` are functions and are called
unmodified. TRL's importance-sampling correction (`vllm_importance_sampling_mode`, `vllm_importance_sampling_clip_min`,
`vllm_importance_sampling_clip_max`) and its `sampling/sampling_logp_difference` metrics are inline in
`GRPOTrainer._generate_and_score_completions`, which needs a model and a vLLM engine: those expressions are restated
below with the file and lines they come from.

verl is not installed: its formulas are restated from the files named at each helper (volcengine/verl, at the commit
given), read there, and written here as they state them.
"""
import json, math

import pytest
import torch
from torch import nn
from hypothesis import HealthCheck, given, settings, strategies as st

from rl_notes.core import kl_penalty
from rl_notes.family import tis_weights
from rl_notes.ppo import ppo_policy_loss, terminal_rewards
from rl_notes.offpolicy import (AdaptiveKLController, RS_LEVELS, decoupled_ppo_loss, effective_sample_size,
                                icepop_mask, kl_shaped_rewards, mismatch_metrics, opsm_mask, ref_reset_due,
                                rejection_mask, reset_reference, staleness_mask)

torch.set_num_threads(1)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _batch(seed=0, B=6, T=10, spread=0.3, pad=True):
    "Learner log-probs, sampler log-probs (learner + N(0, spread^2) noise), advantages (B,), a bool mask with padded rows."
    g = torch.Generator().manual_seed(seed)
    mu = -torch.rand(B, T, generator=g) * 3
    logp = mu + spread * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)
    if pad:
        lens = torch.randint(1, T + 1, (B,), generator=g)
        mask = torch.arange(T)[None] < lens[:, None]
    return logp, mu, adv, mask


# ---- TRL 1.16

trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")


def _trl_is_ratio(train_logp, sampling_logp, mask, mode, clip_min, clip_max):
    "TRL 1.16's importance-sampling correction, as restated once in tests/test_family.py (note the argument order)."
    from test_family import _trl_is_weights  # the one restatement of TRL's code (pytest puts tests/ on sys.path)
    return _trl_is_weights(train_logp, sampling_logp, mask, mode, clip_max, clip_min)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("band", [(0.5, 2.0), (0.8, 1.25), (1.0, 3.0)])
def test_rejection_mask_is_trl_mask_mode(level, band):
    logp, mu, _, mask = _batch(seed=1, spread=0.15)
    ours = rejection_mask(logp, mu, mask, level=level, low=band[0], high=band[1])
    ratio = _trl_is_ratio(logp, mu, mask.float(), f"{level}_mask", band[0], band[1])   # (B, T) or (B, 1)
    assert torch.equal(ours, (ratio > 0).expand_as(mask) & mask)


def test_logp_difference_metrics_match_trl():
    "TRL 1.16 trl/trainer/grpo_trainer.py lines 2860-2866: `sampling/sampling_logp_difference/mean` and `/max`."
    logp, mu, _, mask = _batch(seed=2)
    delta = torch.abs(logp - mu)[mask & ~torch.isnan(torch.abs(logp - mu))]
    mt = mismatch_metrics(logp, mu, mask)
    torch.testing.assert_close(mt["logp_diff_mean"], torch.mean(delta), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(mt["logp_diff_max"], torch.max(delta), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("delta", [0.0, 0.05, 0.3, -0.1])
def test_opsm_matches_trl(delta):
    logp, mu, adv, mask = _batch(seed=3, spread=0.4)
    theirs = trl_grpo.GRPOTrainer.get_off_policy_mask(advantages=adv[:, None], per_token_logps=logp, sampling_per_token_logps=mu,
                                                       mask=mask.float(), off_policy_threshold=delta)   # (B, 1), TRL's own code
    ours = opsm_mask(logp, mu, adv, mask, delta)
    assert torch.equal(ours, theirs.bool().expand_as(mask) & mask)


@pytest.mark.parametrize("alpha", [1.0, 0.6, 0.1])
def test_reset_reference_matches_trl_sync(alpha):
    callbacks = pytest.importorskip("trl.trainer.callbacks")
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    ref_a = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    ref_b = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)); ref_b.load_state_dict(ref_a.state_dict())
    callbacks.SyncRefModelCallback._sync_target_model(policy, ref_a, alpha)   # TRL's own code: target <- (1 - a) target + a model
    reset_reference(policy, ref_b, alpha=alpha)
    for a, b in zip(ref_a.parameters(), ref_b.parameters()): torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


# ---- verl (restated formulas)

SAFETY_BOUND = 20.0


def _verl_rs_mask(log_ratio, response_mask, rollout_rs, upper, lower=None):
    """verl/trainer/ppo/rollout_corr_helper.py `compute_rollout_rejection_mask` (volcengine/verl @ 0b4e2a81), restated:
    token: w = exp(clamp(log_ratio, +-20)); sequence: exp(clamp(masked_sum)); geometric: exp(clamp(masked_mean));
    keep = lower <= w <= upper (lower defaults to 1/upper); the mask returned is response_mask * keep."""
    lower = lower if lower is not None else 1.0 / upper
    m = response_mask.float()
    if rollout_rs == "token":
        w = torch.exp(torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
    elif rollout_rs == "sequence":
        w = torch.exp(torch.clamp((log_ratio * m).sum(-1, keepdim=True), -SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    else:
        s = (log_ratio * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True)
        w = torch.exp(torch.clamp(s, -SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    keep = ((w >= lower) & (w <= upper)).float()
    return m * keep


@pytest.mark.parametrize("level", RS_LEVELS)
@pytest.mark.parametrize("upper,lower", [(2.0, None), (1.1, None), (1.5, 0.9), (5.0, 0.5)])
def test_rejection_mask_matches_verl(level, upper, lower):
    logp, mu, _, mask = _batch(seed=4, spread=0.2)
    ours = rejection_mask(logp, mu, mask, level=level, low=lower if lower is not None else 1 / upper, high=upper)
    theirs = _verl_rs_mask(logp - mu, mask, level, upper, lower)
    assert torch.equal(ours, theirs.bool())
    if level == "token" and (lower, upper) == (0.5, 5.0): assert torch.equal(icepop_mask(logp, mu, mask), ours)


def _verl_ess(weights, response_mask, upper):
    """verl/trainer/ppo/rollout_corr_helper.py `compute_is_metrics` (volcengine/verl @ 0b4e2a81), restated:
    w clamped to [1/upper, upper]; ESS = 1 / masked_mean((w / (masked_mean(w) + 1e-8))^2)."""
    m = response_mask.float()
    mmean = lambda x: (x * m).sum() / m.sum()
    w = weights.clamp(min=1.0 / upper, max=upper)
    return 1.0 / mmean((w / (mmean(w) + 1e-8)).square())


def _verl_offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask):
    """verl/trainer/ppo/rollout_corr_helper.py `compute_offpolicy_metrics` (volcengine/verl @ 0b4e2a81), restated:
    kl = masked_mean(rollout - old); k3_kl = masked_mean(exp(r) - r - 1) with r = old - rollout; chi2_token = masked_mean(exp(r)^2) - 1."""
    m = response_mask.float()
    mmean = lambda x: (x * m).sum() / m.sum()
    r = old_log_prob - rollout_log_prob
    return dict(kl=mmean(rollout_log_prob - old_log_prob), k3_kl=mmean(torch.exp(r) - r - 1),
                chi2_token=mmean(torch.exp(r.clamp(-SAFETY_BOUND, SAFETY_BOUND)).square()) - 1.0)


@pytest.mark.parametrize("seed,spread", [(5, 0.05), (6, 0.3), (7, 1.0)])
def test_measures_match_verl(seed, spread):
    logp, mu, _, mask = _batch(seed=seed, spread=spread)
    upper = 1e6                                                        # the clamp does not bind: ESS of the raw weights
    torch.testing.assert_close(effective_sample_size(logp, mu, mask), _verl_ess((logp - mu).exp(), mask, upper).float(), rtol=1e-5, atol=1e-6)
    mt, v = mismatch_metrics(logp, mu, mask), _verl_offpolicy_metrics(logp, mu, mask)
    torch.testing.assert_close(mt["kl_k1"], v["kl"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mt["kl_k3"], v["k3_kl"], rtol=1e-4, atol=1e-6)


def _verl_seq_is_weights(log_ratio, response_mask, threshold):
    """verl/trainer/ppo/rollout_corr_helper.py `compute_rollout_correction_weights`, rollout_is="sequence"
    (volcengine/verl @ 0b4e2a81), restated: exp(clamp(masked_sum(log_ratio), +-20)), times the mask, clamped at threshold."""
    m = response_mask.float()
    w = torch.exp(torch.clamp((log_ratio * m).sum(-1, keepdim=True), -SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    return (w * m).clamp(max=threshold)


@pytest.mark.parametrize("threshold", [2.0, 5.0])
def test_sequence_tis_is_verl_rollout_is_sequence(threshold):
    logp, mu, _, mask = _batch(seed=8, spread=0.2)
    torch.testing.assert_close(tis_weights(logp, mu, mask, level="sequence", c_max=threshold),
                               _verl_seq_is_weights(logp - mu, mask, threshold), rtol=1e-5, atol=1e-6)


class _VerlAdaptiveKL:
    """verl/trainer/ppo/core_algos.py `AdaptiveKLController` (volcengine/verl @ 012be9d9), restated:
    value *= 1 + clip(current_kl / target - 1, -0.2, 0.2) * n_steps / horizon."""
    def __init__(self, init_kl_coef, target_kl, horizon): self.value, self.target, self.horizon = init_kl_coef, target_kl, horizon
    def update(self, current_kl, n_steps):
        proportional_error = min(max(current_kl / self.target - 1, -0.2), 0.2)
        self.value *= 1 + proportional_error * n_steps / self.horizon


def test_adaptive_kl_matches_verl():
    ours, theirs = AdaptiveKLController(0.05, target=3.0, horizon=10000), _VerlAdaptiveKL(0.05, 3.0, 10000)
    g = torch.Generator().manual_seed(9)
    for kl, n in zip((6 * torch.rand(200, generator=g)).tolist(), torch.randint(1, 512, (200,), generator=g).tolist()):
        ours.update(kl, n); theirs.update(kl, n)
        assert math.isclose(ours.beta, theirs.value, rel_tol=1e-12)


def test_kl_shaped_rewards_match_verl():
    """verl/trainer/ppo/ray_trainer.py `apply_kl_penalty` (volcengine/verl), restated: kld = kl_penalty(old_log_probs,
    ref_log_prob, "kl") * response_mask with "kl" = logprob - ref_logprob; token_level_rewards = token_level_scores - beta * kld,
    the scores placed on each response's last token."""
    logp, ref, _, mask = _batch(seed=10, spread=0.5)
    scores = torch.tensor([1., 0., 0.5, 1., 0., 0.25])
    token_level_scores = terminal_rewards(scores, mask)
    kld = (logp - ref) * mask
    for beta in (0.0, 0.05, 0.2):
        torch.testing.assert_close(kl_shaped_rewards(scores, logp, ref, mask, beta=beta), token_level_scores - beta * kld, rtol=1e-6, atol=1e-7)


def test_decoupled_ppo_is_hilton_formula():
    "Hilton et al. 2021 (arXiv:2110.00641) sec. 3: E_behav[(pi_prox / pi_behav) min(r A, clip(r, 1 - eps, 1 + eps) A)], r = pi / pi_prox."
    behav, _, adv, mask = _batch(seed=11)
    g = torch.Generator().manual_seed(12)
    prox = behav + 0.4 * torch.randn(behav.shape, generator=g)
    logp = (prox + 0.1 * torch.randn(behav.shape, generator=g)).requires_grad_()
    for eps in ((0.2, 0.2), (0.2, 0.28)):
        w, r = (prox - behav).exp(), (logp - prox).exp()
        A = adv[:, None].expand_as(logp)
        ref = -(w * torch.minimum(r * A, r.clamp(1 - eps[0], 1 + eps[1]) * A))[mask].mean()
        ours, _ = decoupled_ppo_loss(logp, prox, behav, adv, mask, eps_low=eps[0], eps_high=eps[1])
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-7)
        g1, = torch.autograd.grad(ours, logp); g2, = torch.autograd.grad(ref, logp)
        torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-8)


# ---- properties

@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000), st.floats(0.01, 2.0), st.sampled_from(RS_LEVELS),
       st.sampled_from([(0.5, 2.0), (0.9, 1.1), (1.0, 1.0), (0.2, 5.0)]))
def test_prop_masks_only_zero_out_and_identity(B, T, seed, spread, level, band):
    logp, mu, adv, mask = _batch(seed=seed, B=B, T=T, spread=spread)
    keep = rejection_mask(logp, mu, mask, level=level, low=band[0], high=band[1])
    assert not (keep & ~mask).any()                                             # only zero out
    assert torch.equal(rejection_mask(logp, logp, mask, level=level, low=band[0], high=band[1]), mask)   # sampler == learner
    assert not (opsm_mask(logp, mu, adv, mask, 0.1) & ~mask).any()
    assert torch.equal(opsm_mask(logp, logp, adv, mask, 0.0), mask)
    if level != "geometric" and band[0] < band[1]:                             # masked IS keeps exactly the kept tokens (a
        # zero-width band is left out: exp(d) rounds to 1 for |d| < 6e-8 in float32, the log-space test does not)
        w = tis_weights(logp, mu, mask, level=level, mode="mask", c_min=band[0], c_max=band[1])
        assert (w >= 0).all() and torch.equal(w > 0, keep)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000), st.floats(0.0, 3.0))
def test_prop_measures(B, T, seed, spread):
    logp, mu, _, mask = _batch(seed=seed, B=B, T=T, spread=spread)
    mt = mismatch_metrics(logp, mu, mask)
    n_tok, n_seq = int(mask.sum()), int(mask.any(-1).sum())
    assert 1 / n_tok - 1e-6 <= float(mt["ess_token"]) <= 1 + 1e-6 and 1 / n_seq - 1e-6 <= float(mt["ess_seq"]) <= 1 + 1e-6
    assert float(mt["kl_k3"]) >= 0 and 0 <= float(mt["out_of_band"]) <= 1
    assert float(mt["logp_diff_q50"]) <= float(mt["logp_diff_q99"]) <= float(mt["logp_diff_max"]) + 1e-6
    same = mismatch_metrics(logp, logp, mask)
    assert float(same["ess_token"]) == 1 and float(same["ess_seq"]) == 1 and float(same["logp_diff_max"]) == 0


@SETTINGS
@given(st.integers(1, 5), st.integers(1, 10), st.integers(0, 10_000), st.sampled_from([None, 1.5, 3.0]), st.sampled_from(["mask", "truncate"]))
def test_prop_decoupled_identity_and_weights(B, T, seed, cap, mode):
    behav, _, adv, mask = _batch(seed=seed, B=B, T=T)
    logp = (behav + 0.1 * torch.randn(behav.shape, generator=torch.Generator().manual_seed(seed))).requires_grad_()
    l1, _ = decoupled_ppo_loss(logp, behav, behav, adv, mask, is_cap=cap, is_mode=mode)   # prox == behav: weight 1, PPO
    l2, _ = ppo_policy_loss(logp, behav, adv, mask)
    torch.testing.assert_close(l1, l2, rtol=1e-6, atol=1e-7)
    prox = behav + 0.5 * torch.randn(behav.shape, generator=torch.Generator().manual_seed(seed + 1))
    _, mt = decoupled_ppo_loss(logp, prox, behav, adv, mask, is_cap=cap, is_mode=mode)
    assert float(mt["behav_weight_mean"]) >= 0 and (cap is None or float(mt["behav_weight_max"]) <= cap + 1e-6)


@SETTINGS
@given(st.lists(st.integers(0, 50), min_size=1, max_size=20), st.integers(0, 60))
def test_prop_staleness(vs, k):
    v = torch.tensor(vs)
    cur = max(vs)
    keep = staleness_mask(v, cur, k)
    assert torch.equal(keep, cur - v <= k) and keep[v == cur].all()
    assert staleness_mask(v, cur, cur - min(vs)).all()


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 10_000), st.floats(0.0, 1.0), st.sampled_from(["k1", "k2", "k3"]))
def test_prop_kl_shaped_rewards(B, T, seed, beta, kind):
    logp, ref, _, mask = _batch(seed=seed, B=B, T=T)
    scores = torch.rand(B, generator=torch.Generator().manual_seed(seed))
    r = kl_shaped_rewards(scores, logp, ref, mask, beta=beta, kind=kind)
    torch.testing.assert_close(r.sum(-1), scores - beta * (kl_penalty(logp, ref, kind=kind) * mask).sum(-1), rtol=1e-5, atol=1e-5)
    assert (r[~mask] == 0).all()
    torch.testing.assert_close(kl_shaped_rewards(scores, logp, logp, mask, beta=beta, kind=kind), terminal_rewards(scores, mask))


def test_adaptive_kl_moves_toward_target():
    for kl, up in ((10.0, True), (1.0, False), (3.0, None)):
        c = AdaptiveKLController(0.1, target=3.0)
        b = c.update(kl, 100)
        assert (b > 0.1) if up else (b < 0.1) if up is False else b == 0.1


def test_ref_reset_schedule_and_errors():
    assert [s for s in range(20) if ref_reset_due(s, 5)] == [5, 10, 15]
    assert not ref_reset_due(0, 1)
    with pytest.raises(ValueError, match="`step` must be an int >= 0"): ref_reset_due(-1, 5)
    with pytest.raises(ValueError, match="differ in the shape"):
        reset_reference(nn.Linear(3, 2), nn.Linear(2, 2))


# ---- the trainer's off-policy fields, end to end through the command line

def _rows(d):
    return [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines()]

def test_cli_sampler_corrections_and_kl_placement(micro_sft, tmp_path, capsys):
    "A stale bf16 sampler corrected with TRL's option names; PPO-RLHF with the adaptive KL and reference resets; bad input is one line."
    from rl_notes.cli import main
    base = ["train", "--model", micro_sft, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false", "--n-prompts", "2",
            "--group-size", "4", "--max-new-tokens", "3", "--n-eval", "4", "--n-train", "200", "--quiet", "--threads", "1", "--steps", "3"]
    assert main(base + ["--algo", "grpo", "--sampler-lag", "1", "--sampler-dtype", "bfloat16", "--vllm-importance-sampling-mode",
                        "token_truncate", "--vllm-importance-sampling-clip-max", "3.0", "--off-policy-mask-threshold", "0.5",
                        "--out", str(tmp_path / "stale")]) == 0
    cfg = json.loads((tmp_path / "stale" / "config.json").read_text())
    assert (cfg["sampler_lag"], cfg["sampler_dtype"], cfg["algo"]["tis"], cfg["algo"]["tis_c_max"], cfg["algo"]["opsm_delta"]) == \
           (1, "bfloat16", "token_truncate", 3.0, 0.5)
    steps = [r for r in _rows(tmp_path / "stale") if r["step"] > 0]
    assert len(steps) == 3 and all(r["mismatch/logp_diff_mean"] > 0 and 0 < r["mismatch/ess_token"] <= 1 for r in steps)
    assert main(base + ["--algo", "ppo_rlhf", "--set", "kl_target=0.01", "--set", "kl_horizon=100", "--sync-ref-model", "--ref-model-sync-steps", "2",
                        "--out", str(tmp_path / "rlhf")]) == 0
    steps = [r for r in _rows(tmp_path / "rlhf") if r["step"] > 0]
    assert [r["step"] for r in steps if r.get("ref_reset")] == [2] and steps[0]["kl_beta"] == 0.05 and steps[1]["kl_beta"] != 0.05
    capsys.readouterr()
    for args, msg in ((["--algo", "dr_grpo", "--set", "kl_in_reward=true"], "Algo.kl_in_reward acts on the KL term, which beta=0 turns off"),
                      (["--sampler-lag", "-1"], "TrainConfig.sampler_lag must be an int >= 0, got -1"),
                      (["--set", "rs=tokens"], "Algo.rs must be one of 'token', 'sequence', 'geometric' or None, got 'tokens'")):
        assert main(base + args + ["--out", str(tmp_path / "bad")]) == 2
        err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
        assert len(err) == 1 and msg in err[0], err
