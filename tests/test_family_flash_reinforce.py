"""FlashREINFORCE: `batch_mean_advantages` and `flash_reinforce_loss` (rl_notes.family), their entries in the algorithm layer and
the `flash_reinforce` preset, against the reference implementation, with hypothesis properties and a few training steps.

The reference implementation is the paper's `flashreinforce_loss` in yifanzhang-pro/FlashREINFORCE, file flashreinforce/loss.py
at commit d7604df3a95f737b34a8cbeb12b17b96d1c45329 (stored file id 69609635348): the base method (negative_token_fraction = 1)
is its lines 57-69 and 88-95. Its formulas are restated in `reference_loss` below. TRL main's experimental
`FlashREINFORCEConfig` (trl/experimental/flash_reinforce/flash_reinforce_config.py, stored file id 69008824713) gives the
defaults the preset takes; TRL 1.16, installed here, does not have it yet."""
import importlib.util, json, math, warnings
from types import SimpleNamespace
import pytest, torch
from hypothesis import given, settings, strategies as st
from rl_notes.family import batch_mean_advantages, flash_reinforce_loss, sampled_binary_kl, nll_loss
from rl_notes.core import agg_loss
from rl_notes.offpolicy import token_divergence
from rl_notes.losses import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, GROUP_FREE_ESTIMATORS, loss_logs
from rl_notes.trainconfig import PRESETS, PRESET_TRAIN, TrainConfig, get_algo, trl_config, KEY_LATE
from rl_notes.configs import ConfigError

torch.set_num_threads(1)


def reference_loss(log_probs, behavior_log_probs, rewards, action_mask, delta=3e-3):
    """The reference `flashreinforce_loss`, base method, restated (loss.py lines 57-69 and 88-95): log-probs promoted to float32
    (float64 kept), advantages r - mean(r) over the batch, per-token binary KL with both probabilities clamped to [1e-6, 1 - 1e-6],
    its mean over each row's tokens clamped at 0, rows admitted at <= delta, weights exp(log pi - log mu) * A on admitted tokens
    (detached), loss -(1/B) sum_i (1/T_i) sum_t w log pi. Returns (loss, acceptance rate, per-row sequence KL)."""
    dt = torch.float64 if log_probs.dtype == torch.float64 else torch.float32
    n = action_mask.sum(-1)
    cur = torch.where(action_mask, log_probs.to(dt), torch.zeros((), dtype=dt))
    with torch.no_grad():
        beh = torch.where(action_mask, behavior_log_probs.to(dt), torch.zeros((), dtype=dt))
        A = rewards.to(dt) - rewards.to(dt).mean()
        p, q = beh.exp().clamp(1e-6, 1 - 1e-6), cur.detach().exp().clamp(1e-6, 1 - 1e-6)
        kl = p * (p.log() - q.log()) + (1 - p) * (torch.log1p(-p) - torch.log1p(-q))
        seq_kl = (torch.where(action_mask, kl, torch.zeros((), dtype=dt)).sum(-1) / n).clamp_min(0)
        ok = action_mask & (seq_kl <= delta)[:, None]
        w = torch.where(ok, (torch.where(ok, cur.detach() - beh, torch.zeros((), dtype=dt)).exp()) * A[:, None], torch.zeros((), dtype=dt))
    return -((w * cur).sum(-1) / n).mean(), (seq_kl <= delta).to(dt).mean(), seq_kl


def _batch(seed, B=8, T=12, dtype=torch.float32, garbage=False):
    """(log pi with grad, log mu, rewards, mask): rows of 1..T tokens; log pi drifts from log mu by a row-dependent amount, so that
    some rows pass delta = 3e-3 and some do not; a few tokens have probabilities within 1e-8 of 1 (the clamp acts)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None] < lengths[:, None]
    mu = torch.log(torch.rand(B, T, generator=g, dtype=torch.float64) * 0.98 + 0.01)
    scale = torch.logspace(-3, -0.5, B, dtype=torch.float64)[torch.randperm(B, generator=g)]       # per-row drift
    lp = (mu + scale[:, None] * torch.randn(B, T, generator=g, dtype=torch.float64)).clamp(max=0.0)
    near_one = torch.rand(B, T, generator=g) < 0.1
    mu, lp = torch.where(near_one, torch.full_like(mu, -1e-9), mu), torch.where(near_one, torch.full_like(lp, -1e-8), lp)
    if garbage:                                                                                    # masked positions hold anything
        lp, mu = lp.masked_fill(~mask, float("nan")), mu.masked_fill(~mask, 7.0)
    rewards = torch.randint(0, 2, (B,), generator=g).to(torch.float64) + 0.1 * torch.rand(B, generator=g, dtype=torch.float64)
    return lp.to(dtype).requires_grad_(), mu.to(dtype), rewards.to(dtype), mask


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("delta", [3e-3, 1e-2, 0.0, math.inf])
def test_matches_reference(seed, dtype, delta):
    "Loss, gradient, acceptance rate and sequence KL equal the reference's to 1e-6, with off-policy behaviour log-probs."
    lp, mu, r, mask = _batch(seed, dtype=dtype, garbage=seed % 2 == 1)
    loss, m = flash_reinforce_loss(lp, mu, batch_mean_advantages(r), mask, delta=delta)
    g, = torch.autograd.grad(loss, lp)
    lp2 = lp.detach().clone().requires_grad_()
    ref, acc, seq_kl = reference_loss(lp2, mu, r, mask, delta)
    g_ref, = torch.autograd.grad(ref, lp2)
    assert abs(loss.item() - ref.item()) <= 1e-6
    assert torch.allclose(g, g_ref, rtol=0, atol=1e-6) and torch.isfinite(g).all()
    assert float(m["acceptance_rate"]) == float(acc)
    assert abs(float(m["sequence_kl"]) - float(seq_kl.mean())) <= 1e-6 and abs(float(m["sequence_kl_max"]) - float(seq_kl.max())) <= 1e-6
    if delta == 3e-3 and seed == 0: assert 0 < float(acc) < 1                                     # both kinds of rows present


@pytest.mark.parametrize("seed", range(4))
def test_algorithm_layer_matches_reference(seed):
    "The trainer's path: the `batch-mean` estimator, then the `flash_reinforce` loss with `old_logp` = mu, as the preset sets them."
    lp, mu, r, mask = _batch(seed)
    algo = get_algo("flash_reinforce")
    adv, ret = ADVANTAGE_ESTIMATORS[algo.adv](algo, SimpleNamespace(score=r))
    loss, pm = POLICY_LOSSES[algo.loss](algo, lp, mu, None, adv, mask, max_tokens=12, global_tokens=None)
    g, = torch.autograd.grad(loss, lp)
    lp2 = lp.detach().clone().requires_grad_()
    ref, acc, _ = reference_loss(lp2, mu, r, mask, algo.flash_delta)
    g_ref, = torch.autograd.grad(ref, lp2)
    assert ret is None and abs(loss.item() - ref.item()) <= 1e-6 and torch.allclose(g, g_ref, rtol=0, atol=1e-6)
    logged = dict((k, float(v)) for k, v, _ in loss_logs(algo, pm, mask))
    assert logged["flash_reinforce/acceptance_rate"] == float(acc)


def test_batch_mean_over_processes():
    "Under data parallelism each process centres its rows on the global batch's mean (the reference: before any partitioning)."
    from rl_notes.core import lockstep
    r = torch.tensor([1., 0., 0., 1., 0.5, 0., 1.])
    parts = lockstep([lambda red, h=h: batch_mean_advantages(r[h], reduce=red) for h in (slice(0, 3), slice(3, 7))])
    assert torch.allclose(torch.cat(parts), r - r.mean(), atol=1e-7)


def test_binary_kl_is_the_gate_metric_inside_the_clamp():
    "`rl_notes.offpolicy`'s `bkl` metric computes the same divergence without the clamp: equal where both probabilities lie in [1e-6, 1 - 1e-6]."
    g = torch.Generator().manual_seed(3)
    mu = torch.log(torch.rand(6, 9, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    lp = (mu + 0.2 * torch.randn(6, 9, generator=g, dtype=torch.float64)).clamp(max=-1e-5)
    mask = torch.rand(6, 9, generator=g) < 0.8
    ours = sampled_binary_kl(lp, mu, mask)
    assert torch.allclose(ours, token_divergence(lp, mu, mask, metric="bkl").masked_fill(~mask, 0), rtol=1e-9, atol=1e-12)


def _on_policy_batch(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(T)[None] < torch.randint(1, T + 1, (B,), generator=g)[:, None]
    lp = torch.log(torch.rand(B, T, generator=g) * 0.95 + 0.02)
    r = torch.rand(B, generator=g)
    return lp, r, mask


@settings(max_examples=40, deadline=None)
@given(B=st.integers(2, 7), T=st.integers(1, 9), seed=st.integers(0, 10_000), scale=st.floats(1e-4, 1.0),
       d1=st.floats(0, 0.05), d2=st.floats(0, 0.05))
def test_admission_monotone_in_delta(B, T, seed, scale, d1, d2):
    "A larger delta admits every response a smaller one admits; the loss of the admitted rows is kept with the denominator B."
    lp, r, mask = _on_policy_batch(B, T, seed)
    mu = (lp + scale * torch.randn(B, T, generator=torch.Generator().manual_seed(seed + 1))).clamp(max=0.0)
    lo, hi = sorted((d1, d2))
    adv = batch_mean_advantages(r)
    (l_lo, m_lo), (l_hi, m_hi) = flash_reinforce_loss(lp, mu, adv, mask, delta=lo), flash_reinforce_loss(lp, mu, adv, mask, delta=hi)
    assert float(m_lo["acceptance_rate"]) <= float(m_hi["acceptance_rate"])
    seq_kl = sampled_binary_kl(lp, mu, mask).sum(-1) / mask.sum(-1)
    keep = seq_kl <= lo
    if keep.any():
        kept, _ = flash_reinforce_loss(lp[keep], mu[keep], adv[keep], mask[keep], delta=math.inf)
        assert math.isclose(l_lo.item(), kept.item() * int(keep.sum()) / B, rel_tol=1e-5, abs_tol=1e-6)
    else: assert l_lo.item() == 0.0


@settings(max_examples=40, deadline=None)
@given(B=st.integers(2, 7), T=st.integers(1, 9), seed=st.integers(0, 10_000), delta=st.floats(0, 1))
def test_on_policy_is_reinforce_with_batch_mean(B, T, seed, delta):
    "mu = pi: every response admitted at any delta >= 0, weight 1: the loss and gradient of -(1/B) sum_i (A_i / |y_i|) sum_t log pi."
    lp, r, mask = _on_policy_batch(B, T, seed)
    adv = batch_mean_advantages(r)
    a, b = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    loss, m = flash_reinforce_loss(a, lp, adv, mask, delta=delta)
    ref, _ = nll_loss(b, lp, adv, mask, agg="seq-mean-token-mean")
    ga, = torch.autograd.grad(loss, a); gb, = torch.autograd.grad(ref, b)
    assert float(m["acceptance_rate"]) == 1.0 and float(m["sequence_kl"]) == 0.0
    assert math.isclose(loss.item(), ref.item(), rel_tol=1e-6, abs_tol=1e-7) and torch.allclose(ga, gb, atol=1e-7)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(2, 7), T=st.integers(1, 9), seed=st.integers(0, 10_000), scale=st.floats(1e-3, 0.5), c=st.floats(-3, 3))
def test_gradient_is_the_unclipped_surrogate(B, T, seed, scale, c):
    "With every response admitted the gradient is that of -agg(A pi / mu) (PPO's surrogate without its clip, mu as pi_old); linear in A."
    lp, r, mask = _on_policy_batch(B, T, seed)
    mu = (lp + scale * torch.randn(B, T, generator=torch.Generator().manual_seed(seed + 1))).clamp(max=0.0)
    adv = batch_mean_advantages(r)
    a, b = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    loss, _ = flash_reinforce_loss(a, mu, adv, mask, delta=math.inf)
    ga, = torch.autograd.grad(loss, a)
    gb, = torch.autograd.grad(agg_loss(-(b - mu).exp() * adv[:, None], mask, "seq-mean-token-mean"), b)
    assert torch.allclose(ga, gb, rtol=1e-5, atol=1e-6)
    scaled, _ = flash_reinforce_loss(lp, mu, c * adv, mask, delta=math.inf)
    assert math.isclose(scaled.item(), c * loss.item(), rel_tol=1e-5, abs_tol=1e-6)


def test_bad_input():
    lp, mu, r, mask = _batch(0)
    adv = batch_mean_advantages(r)
    for kw, msg in ((dict(delta=-1.0), "`delta` must be a number >= 0"), (dict(delta=float("nan")), "`delta` must be a number >= 0"),
                    (dict(delta=True), "`delta` must be a number >= 0")):
        with pytest.raises(ValueError, match=msg): flash_reinforce_loss(lp, mu, adv, mask, **kw)
    with pytest.raises(ValueError, match="`behaviour_logp` must hold finite log-probabilities <= 0"): flash_reinforce_loss(lp, mu.abs() + 0.1, adv, mask)
    with pytest.raises(ValueError, match="`behaviour_logp` must have the shape of `logp`"): flash_reinforce_loss(lp, mu[:, :3], adv, mask)
    with pytest.raises(ValueError, match=r"`adv` must be \(B, T\)"): flash_reinforce_loss(lp, mu, adv[:2], mask)
    with pytest.raises(ValueError, match="the ratio pi/mu overflows"):                     # an admitted token with pi / mu > 3e38
        flash_reinforce_loss(torch.zeros(2, 1), torch.full((2, 1), -100.0), adv[:2], torch.ones(2, 1, dtype=torch.bool), delta=math.inf)
    with pytest.raises(ValueError, match="at least 2 responses"): batch_mean_advantages(r[:1])


def test_preset_has_trl_defaults():
    "The preset and its TrainConfig settings against TRL main's FlashREINFORCEConfig defaults (restated: delta=3e-3, num_generations=1,"
    " scale_rewards='none', num_iterations=1, beta=0, no clip nor correction of its own)."
    trl_defaults = dict(delta=3e-3, num_generations=1, scale_rewards="none", num_iterations=1, beta=0.0)
    c = trl_config("flash_reinforce", model="m")
    a = c.algo
    assert (a.flash_delta, c.group_size, a.adv, c.ppo_epochs, a.beta) == (trl_defaults["delta"], trl_defaults["num_generations"], "batch-mean",
                                                                          trl_defaults["num_iterations"], trl_defaults["beta"])
    assert (a.loss, a.agg, a.clip_anchor, a.tis, a.rs, a.gate) == ("flash_reinforce", "seq-mean-token-mean", "sampler", None, None, None)
    assert PRESET_TRAIN["flash_reinforce"] == {"group_size": 1} and KEY_LATE["algo.flash_delta"] == PRESETS["flash_reinforce"]["flash_delta"]
    assert "batch-mean" in GROUP_FREE_ESTIMATORS
    with warnings.catch_warnings():                                                     # finding it imports trl.experimental, which warns
        warnings.simplefilter("ignore")
        newer = importlib.util.find_spec("trl") is not None and importlib.util.find_spec("trl.experimental.flash_reinforce") is not None
    if newer:                                                                           # a TRL that has it: its own defaults
        from trl.experimental.flash_reinforce import FlashREINFORCEConfig
        f = FlashREINFORCEConfig(output_dir="/tmp/flash_reinforce_defaults", report_to="none")
        assert (f.delta, f.num_generations, f.scale_rewards, f.num_iterations, f.beta) == tuple(trl_defaults.values())


def test_settings_errors():
    with pytest.raises(ValueError, match="group_size must be >= 2, got 1; one response per prompt needs a baseline without a group"):
        TrainConfig(model="m", algo="grpo", group_size=1)
    assert TrainConfig(model="m", algo="flash_reinforce", group_size=1).group_size == 1
    assert TrainConfig(model="m", algo=get_algo("grpo", adv="batch-mean"), group_size=1).group_size == 1   # the estimator alone is group-free
    with pytest.raises(ValueError, match="ppo_epochs and n_minibatches must be 1, got 1 and 2"):
        TrainConfig(model="m", algo="flash_reinforce", group_size=1, n_minibatches=2)
    with pytest.raises(ValueError, match="needs clip_anchor='sampler'"): get_algo("flash_reinforce", clip_anchor="learner")
    with pytest.raises(ValueError, match="has no KL term"): get_algo("flash_reinforce", beta=0.04)
    with pytest.raises(ConfigError, match="not FlashREINFORCEConfig's delta"): get_algo("flash_reinforce", delta=3e-3)
    assert get_algo("flash_reinforce", flash_delta=math.inf).flash_delta == math.inf
    c = TrainConfig(model="m", algo=get_algo("flash_reinforce", flash_delta=math.inf), group_size=1)
    assert TrainConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c                    # inf survives config.json


def _rows(rows): return [r for r in rows if "loss" in r]

def test_tiny_run_logs_acceptance(micro_sft, tmp_path):
    "A few steps of the preset with one response per prompt: finite losses, the acceptance rate and sequence KL in every row; all"
    " admitted when the sampler is the learner, and fewer (a larger KL) when the sampler samples at another temperature."
    from rl_notes.trainer import train
    kw = dict(model=micro_sft, algo="flash_reinforce", group_size=1, task_kw=dict(max_digits=2, scratchpad=False), steps=3, n_prompts=8,
              max_new_tokens=3, n_train=200, n_eval=0, progress=False, threads=1)
    same = _rows(train(TrainConfig(out_dir=str(tmp_path / "same"), **kw)))
    hot = _rows(train(TrainConfig(out_dir=str(tmp_path / "hot"), sampler_temperature=3.0, **kw)))
    for name, rows in (("sampler = learner", same), ("sampler at temperature 3", hot)):
        acc = [r["flash_reinforce/acceptance_rate"] for r in rows]
        kl = [r["flash_reinforce/sequence_kl"] for r in rows]
        print(f"{name}: acceptance rate per step {acc}, mean sequence KL {[f'{x:.1e}' for x in kl]}")
        assert len(rows) == 3 and all(math.isfinite(r["loss"]) and 0 <= r["flash_reinforce/acceptance_rate"] <= 1 for r in rows)
    assert all(r["flash_reinforce/acceptance_rate"] == 1.0 for r in same) and any(r["grad_norm"] > 0 for r in same)
    assert max(r["flash_reinforce/sequence_kl"] for r in same) < 1e-6 < min(r["flash_reinforce/sequence_kl"] for r in hot)
    cfg = json.loads((tmp_path / "same" / "config.json").read_text())
    assert cfg["group_size"] == 1 and cfg["algo"]["loss"] == "flash_reinforce"


def test_cli_flash_reinforce(micro_sft, tmp_path, capsys):
    "`rl_notes train --algo flash_reinforce` samples one response per prompt unless --group-size says otherwise."
    from rl_notes.cli import main
    args = ["train", "--model", micro_sft, "--algo", "flash_reinforce", "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false",
            "--n-prompts", "4", "--max-new-tokens", "3", "--n-eval", "0", "--n-train", "200", "--quiet", "--threads", "1", "--steps", "1"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    assert "samples 4 completions (4 prompts x 1)" in capsys.readouterr().out
    assert json.loads((tmp_path / "a" / "config.json").read_text())["group_size"] == 1
    assert main(args + ["--group-size", "2", "--set", "flash_delta=0.01", "--out", str(tmp_path / "b")]) == 0
    cfg = json.loads((tmp_path / "b" / "config.json").read_text())
    assert (cfg["group_size"], cfg["algo"]["flash_delta"]) == (2, 0.01)
