"""rl_notes.family against TRL 1.16's own code (unmodified) and against the papers' formulas restated here.

TRL's GSPO (`importance_sampling_level="sequence"`), CISPO (`loss_type="cispo"`) and `top_entropy_quantile` are computed
inside `GRPOTrainer._compute_loss`; the test calls that method itself on a lightweight stand-in for the trainer whose
model call returns the test's log-probs (`_trl_loss`). `GRPOTrainer.get_high_entropy_mask` is called the same way.
TRL's importance-sampling correction (`vllm_importance_sampling_mode`) and RLOO advantages are inline in the generation
methods, which need a model and a vLLM engine: their formulas are restated below with the file and lines they come from.
"""
import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from rl_notes.core import lockstep
from rl_notes.grpo import group_advantages, grpo_loss
from rl_notes.ppo import ppo_policy_loss
from rl_notes.family import (rloo_advantages, reinforce_pp_advantages, gspo_loss, cispo_loss, tis_weights,
                             high_entropy_mask, accelerate_gather, clip_cov_mask, kl_cov_loss, _token_cov)

torch.set_num_threads(1)
trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")
GRPOTrainer = trl_grpo.GRPOTrainer


# ---- TRL's GRPOTrainer._compute_loss on a stand-in trainer

class _Accelerator:
    "One process: every collective is the identity."
    num_processes, sync_gradients = 1, True
    def reduce(self, t, reduction="sum"): return t
    def gather(self, t): return t
    def gather_for_metrics(self, t): return t
    def pad_across_processes(self, t, dim=0, pad_index=0): return t


def _trainer(loss_type="grpo", level="token", eps_low=0.2, eps_high=0.2, top_entropy_quantile=1.0, model_out=None):
    "The attributes `_compute_loss` reads, with the model call replaced by `model_out` = (logp, entropy)."
    t = SimpleNamespace(
        loss_type=loss_type, importance_sampling_level=level, epsilon_low=eps_low, epsilon_high=eps_high, beta=0.0,
        top_entropy_quantile=top_entropy_quantile, off_policy_mask_threshold=None, use_vllm=False,
        vllm_importance_sampling_correction=False, model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1,
        accelerator=_Accelerator(), _entropy_bonus_enabled=False, aux_loss_enabled=False, _metrics={"train": defaultdict(list)},
        args=SimpleNamespace(delta=None, steps_per_generation=1, use_bias_correction_kl=False))
    t.get_high_entropy_mask = lambda e, m, thr: GRPOTrainer.get_high_entropy_mask(t, e, m, thr)
    t._get_per_token_logps_and_entropies = lambda *a, **k: (model_out[0], model_out[1], None)
    return t


def _trl_loss(logp, old_logp, adv, mask, entropy=None, **kw):
    "TRL's loss (and its metrics) for (B, T) log-probs and (B,) advantages."
    B, T = logp.shape
    t = _trainer(model_out=(logp, entropy if entropy is not None else torch.zeros_like(logp)), **kw)
    inputs = dict(prompt_ids=torch.zeros(B, 1, dtype=torch.long), prompt_mask=torch.ones(B, 1, dtype=torch.long),
                  completion_ids=torch.zeros(B, T, dtype=torch.long), completion_mask=mask.long(), advantages=adv,
                  old_per_token_logps=old_logp, num_items_in_batch=mask.sum().float())
    return GRPOTrainer._compute_loss(t, None, inputs), t._metrics["train"]


def _batch(seed=0, B=8, T=12, spread=0.3, pad=True):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T, dtype=torch.bool)
    if pad:
        for i in range(B): mask[i, int(torch.randint(min(2, T), T + 1, (1,), generator=g)):] = False
    old = -torch.rand(B, T, generator=g) * 3
    logp = (old + spread * torch.randn(B, T, generator=g)).requires_grad_()
    adv = torch.randn(B, generator=g)
    return logp, old, adv, mask


def _grad(loss, x): return torch.autograd.grad(loss, x)[0]


@pytest.mark.parametrize("eps", [(0.2, 0.2), (3e-4, 4e-4), (0.02, 0.05)])
def test_gspo_matches_trl_sequence_level(eps):
    logp, old, adv, mask = _batch(spread=0.05)
    ours, mt = gspo_loss(logp, old, adv, mask, eps_low=eps[0], eps_high=eps[1])
    theirs, tm = _trl_loss(logp, old, adv, mask, level="sequence", eps_low=eps[0], eps_high=eps[1])
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(_grad(ours, logp), _grad(theirs, logp), rtol=1e-5, atol=1e-8)
    # TRL's clip_ratio/region_mean is per sequence at the sequence level
    assert float(mt["seq_clipfrac"]) == pytest.approx(tm["clip_ratio/region_mean"][0], abs=1e-6)


@pytest.mark.parametrize("eps_high,eps_low", [(0.2, None), (4.0, None), (0.28, 0.2)])
def test_cispo_matches_trl(eps_high, eps_low):
    logp, old, adv, mask = _batch(spread=0.5)
    ours, mt = cispo_loss(logp, old, adv, mask, eps_high=eps_high, eps_low=eps_low)
    if eps_low is None:  # TRL's cispo has no lower bound; its epsilon_high is the absolute bound 1 + eps_high
        theirs, tm = _trl_loss(logp, old, adv, mask, loss_type="cispo", eps_high=1 + eps_high)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(_grad(ours, logp), _grad(theirs, logp), rtol=1e-5, atol=1e-8)
        assert float(mt["clipfrac_high"]) == pytest.approx(tm["cispo_clip_ratio"][0], abs=1e-6)
    else:  # a lower bound: MiniMax-M1 eq. 5, clip(r, 1 - eps_low, 1 + eps_high), restated
        m = mask.float()
        w = (logp - old).exp().clamp(1 - eps_low, 1 + eps_high).detach()
        ref = (-w * adv[:, None] * logp * m).sum() / m.sum()
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(_grad(ours, logp), _grad(ref, logp), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("rho", [0.2, 0.05, 0.5, 1.0, 0.0])
def test_high_entropy_mask_matches_trl(rho):
    logp, old, adv, mask = _batch(seed=1, B=6, T=40)
    ent = torch.rand(logp.shape, generator=torch.Generator().manual_seed(5)) * 4
    t = _trainer()
    theirs = GRPOTrainer.get_high_entropy_mask(t, ent, mask.long(), 1 - rho)
    assert torch.equal(high_entropy_mask(ent, mask, rho), theirs)
    # in the loss: TRL multiplies the per-token loss by the mask; detaching the other tokens gives the same gradient
    if rho < 1:
        theirs_loss, _ = _trl_loss(logp, old, adv, mask, entropy=ent, top_entropy_quantile=rho)
        keep = high_entropy_mask(ent, mask, rho)
        ours, _ = grpo_loss(torch.where(keep, logp, logp.detach()), old, None, adv, mask, beta=0.0)
        torch.testing.assert_close(_grad(ours, logp), _grad(theirs_loss, logp), rtol=1e-5, atol=1e-8)


def _trl_is_weights(train_logp, sampling_logp, mask, mode, clip_max, clip_min):
    "TRL 1.16 trl/trainer/grpo_trainer.py lines 2657-2707 (`_generate_and_score_completions`), restated."
    diff = torch.nan_to_num((train_logp - sampling_logp) * mask, nan=0.0)
    if mode in ["sequence_mask", "sequence_truncate"]: diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode in ["sequence_truncate", "token_truncate"]:
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    lo = clip_min if clip_min is not None else -math.inf
    hi = clip_max if clip_max is not None else math.inf
    return ratio.masked_fill((ratio < lo) | (ratio > hi), value=0.0)


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
@pytest.mark.parametrize("c", [(3.0, None), (2.0, 0.5), (1.5, 0.9)])
def test_tis_weights_match_trl_modes(mode, c):
    logp, old, _, mask = _batch(seed=2, spread=0.1)
    level, how = mode.split("_")
    ours = tis_weights(logp, old, mask, level=level, mode=how, c_max=c[0], c_min=c[1])
    theirs = _trl_is_weights(logp.detach(), old, mask.float(), mode, c[0], c[1])           # (B, T) or (B, 1)
    torch.testing.assert_close(ours, (theirs * mask).expand_as(ours), rtol=1e-6, atol=1e-7)
    assert not ours.requires_grad


def _trl_rloo(rewards, G):
    "TRL 1.16 trl/trainer/rloo_trainer.py lines 1676-1690 (`_generate_and_score_completions`), restated (all rows scorable)."
    grouped = rewards.view(-1, G)
    counts = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    baselines = ((torch.nansum(grouped, dim=1, keepdim=True) - grouped) / (counts - 1)).view(-1)
    return rewards - baselines


@pytest.mark.parametrize("G", [2, 4, 8])
def test_rloo_matches_trl(G):
    r = torch.rand(6 * G, generator=torch.Generator().manual_seed(G))
    r[:G] = 1.0                                                                             # one group without signal
    torch.testing.assert_close(rloo_advantages(r, G), _trl_rloo(r, G), rtol=1e-5, atol=1e-6)


# ---- the papers' formulas where TRL has no counterpart

def _reinforce_pp_paper(r, G=None, eps=1e-6):
    "REINFORCE++ (arXiv 2501.03262, sec. 3): A = r (baseline: r - mean of its group), then (A - mean_batch) / std_batch."
    a = r.double() if G is None else (r.double().view(-1, G) - r.double().view(-1, G).mean(-1, keepdim=True)).view(-1)
    return ((a - a.mean()) / (a.var() + eps).sqrt()).float()


@pytest.mark.parametrize("G", [None, 2, 4])
def test_reinforce_pp_matches_paper(G):
    r = torch.rand(16, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(reinforce_pp_advantages(r, G), _reinforce_pp_paper(r, G), rtol=1e-5, atol=1e-6)


def test_reinforce_pp_data_parallel_equals_one_process():
    r = torch.rand(24, generator=torch.Generator().manual_seed(4))
    parts = r.view(3, 8)                                                                    # 3 processes, whole groups of 4
    out = lockstep([lambda red, i=i: reinforce_pp_advantages(parts[i], 4, reduce=red) for i in range(3)])
    torch.testing.assert_close(torch.cat(out), _reinforce_pp_paper(r, 4), rtol=1e-5, atol=1e-6)


def _cov_paper(logp, adv, mask):
    "arXiv 2505.22617 sec. 5: Cov(y_i) = (log pi(y_i) - mean_j log pi(y_j)) (A(y_i) - mean_j A(y_j)), over the batch's tokens."
    lp, a = logp[mask], adv[mask]
    return (lp - lp.mean()) * (a - a.mean())


def test_clip_cov_matches_paper_selection():
    logp, old, adv, mask = _batch(seed=6, B=32, T=64, spread=0.02)
    lp = logp.detach() * 3
    A = adv[:, None].expand_as(lp) * 3
    cov = _cov_paper(lp, A, mask)
    cand = (cov > 1.0) & (cov < 5.0)                                                        # omega_low < Cov < omega_high
    N = int(mask.sum())
    for r in (2e-4, 1e-2, 0.05, 1.0):
        keep = clip_cov_mask(lp, adv * 3, mask, clip_ratio=r, generator=torch.Generator().manual_seed(0))
        touched = (mask & ~keep)[mask]
        assert int(touched.sum()) == min(max(1, int(r * N)), int(cand.sum()))            # |I_clip| = r N (at least 1)
        assert not (touched & ~cand).any()                                                 # only candidates
    # the same generator seed gives the same choice
    k1 = clip_cov_mask(lp, adv, mask, clip_ratio=0.01, cov_lb=0.0, generator=torch.Generator().manual_seed(1))
    k2 = clip_cov_mask(lp, adv, mask, clip_ratio=0.01, cov_lb=0.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(k1, k2)
    # with old_logp, tokens PPO's clip already stops are not candidates (verl's clip_by_origin)
    r = (logp.detach() - old).exp()
    stopped = ((adv[:, None] > 0) & (r > 1.2)) | ((adv[:, None] < 0) & (r < 0.8))
    keep = clip_cov_mask(logp.detach(), adv, mask, clip_ratio=1.0, cov_lb=-1e9, cov_ub=1e9, old_logp=old)
    assert torch.equal(mask & ~keep, mask & ~stopped)


@pytest.mark.parametrize("k,beta", [(2e-3, 1.0), (0.05, 0.5), (1.0, 2.0)])
def test_kl_cov_matches_paper(k, beta):
    logp, old, adv, mask = _batch(seed=7, B=16, T=32, spread=0.1)
    ours, mt = kl_cov_loss(logp, old, adv, mask, kl_ratio=k, beta=beta)
    # arXiv 2505.22617 sec. 5 (KL-Cov): I_KL = the floor(k N) tokens of largest Cov; loss = mean_t [-r_t A_t + beta |log r_t| 1(t in I_KL)]
    cov = _cov_paper(logp.detach(), adv[:, None].expand_as(logp), mask)
    sel = torch.zeros_like(cov, dtype=torch.bool)
    sel[cov.topk(max(1, int(k * cov.numel()))).indices] = True
    lr = (logp - old)[mask]
    ref = (-lr.exp() * adv[:, None].expand_as(logp)[mask] + beta * lr.abs() * sel).mean()
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(_grad(ours, logp), _grad(ref, logp), rtol=1e-5, atol=1e-8)
    assert float(mt["kl_cov_frac"]) == pytest.approx(sel.float().mean().item(), abs=1e-6)


def test_bad_input_names_the_argument():
    logp, old, adv, mask = _batch()
    cases = [(lambda: gspo_loss(logp, old, adv, mask, eps_high=-1), "`eps_high`"),
             (lambda: cispo_loss(logp, old[:2], adv, mask, 0.2), "`old_logp`"),
             (lambda: cispo_loss(logp, old, adv[:3], mask, 0.2), "`adv`"),
             (lambda: tis_weights(logp, old, mask, c_max=-1.), "`c_max`"),
             (lambda: tis_weights(logp, old, mask[:, :3]), "`mask`"),
             (lambda: high_entropy_mask(old, mask, quantile=-0.1), "`quantile`"),
             (lambda: high_entropy_mask(old, mask, gather="all"), "`gather` must be callable"),
             (lambda: high_entropy_mask(old, mask, gather=lambda t: t.view(1, -1)), "`gather` must return a 1-D tensor"),
             (lambda: high_entropy_mask(old, mask, gather=lambda t: t.tolist()), "`gather` must return a 1-D tensor"),
             (lambda: clip_cov_mask(logp, adv, mask, reduce=0), "`reduce` must be callable"),
             (lambda: clip_cov_mask(logp, adv, mask, reduce=lambda t: t.sum()), "`reduce` must return a tensor of the shape"),
             (lambda: kl_cov_loss(logp, old, adv, mask, reduce="sum"), "`reduce` must be callable"),
             (lambda: clip_cov_mask(logp, adv, mask, clip_ratio=float('nan')), "`clip_ratio`"),
             (lambda: kl_cov_loss(logp, old, adv, mask, beta=-1.), "`beta`"),
             (lambda: rloo_advantages(torch.ones(6), 4), "`group_size`=4"),
             (lambda: reinforce_pp_advantages(torch.ones(2, 3)), "`rewards`")]
    for fn, name in cases:
        with pytest.raises(ValueError, match=name.replace("(", r"\(")):
            fn()


# ---- data parallel: W processes simulated by `lockstep` threads

class _LockstepAccelerator:
    "Accelerate's `gather` and `pad_across_processes` for process `rank` of W `lockstep` threads, built from sums (exact: x + 0 = x)."
    def __init__(self, reduce, rank, W): self.reduce, self.rank, self.num_processes = reduce, rank, W
    def gather(self, t):
        buf = torch.zeros(self.num_processes, *t.shape, dtype=torch.float64); buf[self.rank] = t.double()
        return self.reduce(buf).to(t.dtype).reshape(-1, *t.shape[1:])          # the processes' tensors, concatenated on dim 0
    def pad_across_processes(self, t, dim=0, pad_index=0):
        n = self.gather(torch.tensor([t.shape[dim]]))                           # every process's length
        pad = list(t.shape); pad[dim] = int(n.max()) - t.shape[dim]
        return torch.cat([t, torch.full(pad, pad_index, dtype=t.dtype)], dim=dim)


def _split(B, cuts):
    "Row slices of W processes from sorted cut points in [0, B] (a process may hold no row)."
    edges = [0, *sorted(cuts), B]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


@pytest.mark.parametrize("rho", [0.2, 0.05, 0.5, 1.0])
def test_high_entropy_gather_matches_trl_across_processes(rho):
    g = torch.Generator().manual_seed(11)
    ent, mask = torch.rand(10, 24, generator=g) * 2, torch.rand(10, 24, generator=g) < 0.7
    ent[:4] *= 0.3                                                              # process 0: the confident responses
    parts = _split(10, [4])
    def proc(red, i):
        acc = _LockstepAccelerator(red, i, len(parts))
        h = parts[i]
        # TRL's code, unmodified, on a stand-in trainer whose accelerator gathers across the threads
        theirs = GRPOTrainer.get_high_entropy_mask(SimpleNamespace(accelerator=acc), ent[h], mask[h].long(), 1 - rho)
        return high_entropy_mask(ent[h], mask[h], rho, gather=accelerate_gather(acc)), theirs
    out = lockstep([lambda red, i=i: proc(red, i) for i in range(len(parts))])
    for ours, theirs in out: assert torch.equal(ours, theirs)                   # the same global threshold as TRL's
    assert torch.equal(torch.cat([o for o, _ in out]), high_entropy_mask(ent, mask, rho))   # union = the whole batch
    if rho < 1:
        local = torch.cat([high_entropy_mask(ent[h], mask[h], rho) for h in parts])
        assert not torch.equal(local, high_entropy_mask(ent, mask, rho))       # the local quantile is another mask


def test_accelerate_gather_one_process():
    t = torch.rand(5)
    assert torch.equal(accelerate_gather(_Accelerator())(t), t)
    assert accelerate_gather(_Accelerator())(torch.zeros(0)).numel() == 0

# ---- properties (hypothesis)

hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

SETTINGS = settings(max_examples=30, deadline=None)


@SETTINGS
@given(st.integers(2, 6), st.integers(1, 4), st.integers(0, 10_000))
def test_prop_rloo(G, n, seed):
    r = torch.randint(0, 3, (n * G,), generator=torch.Generator().manual_seed(seed)).float()
    a = rloo_advantages(r, G)
    torch.testing.assert_close(a, group_advantages(r, G, scale="none") * G / (G - 1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a.view(n, G).sum(-1), torch.zeros(n), atol=1e-5, rtol=0)   # zero sum per group
    torch.testing.assert_close(a, _trl_rloo(r, G), rtol=1e-5, atol=1e-5)


@SETTINGS
@given(st.integers(2, 6), st.integers(2, 10), st.integers(0, 10_000), st.sampled_from([(0.2, 0.2), (3e-4, 4e-4), (0.01, 0.03)]))
def test_prop_gspo_token_form_gradient(B, T, seed, eps):
    logp, old, adv, mask = _batch(seed=seed, B=B, T=T, spread=0.02)
    ours, _ = gspo_loss(logp, old, adv, mask, eps_low=eps[0], eps_high=eps[1])
    theirs, _ = _trl_loss(logp, old, adv, mask, level="sequence", eps_low=eps[0], eps_high=eps[1])
    torch.testing.assert_close(_grad(ours, logp), _grad(theirs, logp), rtol=1e-4, atol=1e-7)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 10), st.integers(0, 10_000))
def test_prop_cispo_inside_bounds_is_ppo(B, T, seed):
    logp, old, adv, mask = _batch(seed=seed, B=B, T=T, spread=0.05, pad=False)
    g_c = _grad(cispo_loss(logp, old, adv, mask, eps_high=10.0, eps_low=0.99)[0], logp)   # bounds never bind
    g_p = _grad(ppo_policy_loss(logp, old, adv, mask, eps_low=0.99, eps_high=10.0)[0], logp)
    torch.testing.assert_close(g_c, g_p, rtol=1e-5, atol=1e-8)


@SETTINGS
@given(st.integers(1, 5), st.integers(1, 8), st.integers(0, 10_000))
def test_prop_tis_sequence_is_product(B, T, seed):
    logp, old, _, mask = _batch(seed=seed, B=B, T=T, spread=0.2)
    tok = tis_weights(logp, old, mask, c_max=None)
    seq = tis_weights(logp, old, mask, level="sequence", c_max=None)
    prod = torch.where(mask, tok, torch.ones_like(tok)).double().prod(-1).float()
    torch.testing.assert_close(seq[:, 0], prod, rtol=1e-4, atol=1e-6)


@SETTINGS
@given(st.integers(1, 8), st.integers(1, 40), st.floats(0.0, 1.0), st.integers(0, 10_000))
def test_prop_high_entropy_share(B, T, rho, seed):
    g = torch.Generator().manual_seed(seed)
    ent, mask = torch.rand(B, T, generator=g), torch.rand(B, T, generator=g) < 0.7
    keep = high_entropy_mask(ent, mask, rho)
    N = int(mask.sum())
    if N: assert abs(int(keep.sum()) - rho * N) <= 1
    assert not (keep & ~mask).any()


@SETTINGS
@given(st.integers(2, 8), st.integers(2, 30), st.floats(0.0, 0.5), st.integers(0, 10_000))
def test_prop_cov_selection_counts(B, T, k, seed):
    logp, old, adv, mask = _batch(seed=seed, B=B, T=T, spread=0.05)
    N = int(mask.sum())
    _, mt = kl_cov_loss(logp, old, adv, mask, kl_ratio=k)
    assert round(float(mt["kl_cov_frac"]) * N) == (min(max(1, int(k * N)), N) if k > 0 else 0)
    cov = _token_cov(logp.detach(), adv[:, None].expand_as(logp), mask)
    n_cand = int((mask & (cov > -1e9) & (cov < 1e9)).sum())
    keep = clip_cov_mask(logp, adv, mask, clip_ratio=k, cov_lb=-1e9, cov_ub=1e9, generator=torch.Generator().manual_seed(seed))
    assert int((mask & ~keep).sum()) == (min(max(1, int(k * N)), n_cand) if k > 0 else 0)


@SETTINGS
@given(st.integers(1, 10), st.integers(1, 30), st.lists(st.integers(0, 10), min_size=1, max_size=3), st.floats(0.0, 1.0),
       st.integers(0, 10_000))
def test_prop_high_entropy_gather_union_is_whole_batch(B, T, cuts, rho, seed):
    g = torch.Generator().manual_seed(seed)
    ent, mask = torch.rand(B, T, generator=g), torch.rand(B, T, generator=g) < 0.6
    parts = _split(B, [min(c, B) for c in cuts])
    out = lockstep([lambda red, i=i, h=h: high_entropy_mask(ent[h], mask[h], rho, gather=accelerate_gather(_LockstepAccelerator(red, i, len(parts))))
                    for i, h in enumerate(parts)])
    assert torch.equal(torch.cat(out), high_entropy_mask(ent, mask, rho))


@SETTINGS
@given(st.integers(2, 10), st.integers(2, 30), st.lists(st.integers(0, 10), min_size=1, max_size=3), st.floats(0.0, 0.3),
       st.integers(0, 10_000))
def test_prop_cov_reduce_global_centring(B, T, cuts, r, seed):
    logp, old, adv, mask = _batch(seed=seed, B=B, T=T, spread=0.05)
    lp, adv = logp.detach() * 3, adv * 3 + torch.arange(B) / B                  # rows of unequal mean advantage
    A = adv[:, None].expand_as(lp)
    parts = _split(B, [min(c, B) for c in cuts])
    cov_all = _token_cov(lp, A, mask)
    cov_dp = torch.cat(lockstep([lambda red, h=h: _token_cov(lp[h], A[h], mask[h], red) for h in parts]))
    torch.testing.assert_close(cov_dp[mask], cov_all[mask], rtol=1e-4, atol=1e-4)   # global centring means
    assert (cov_dp[~mask] == -math.inf).all()
    cand = lambda c: mask & (c > 1.0) & (c < 5.0)
    far = ((cov_all - 1.0).abs() > 1e-3) & ((cov_all - 5.0).abs() > 1e-3)
    assert torch.equal(cand(cov_dp) & far, cand(cov_all) & far)                 # the whole batch's candidate set
    keep = torch.cat(lockstep([lambda red, h=h: clip_cov_mask(lp[h], adv[h], mask[h], clip_ratio=r, reduce=red,
                                                              generator=torch.Generator().manual_seed(seed)) for h in parts]))
    touched = mask & ~keep
    assert not (touched & ~cand(cov_dp)).any() and not (keep & ~mask).any()
    for h in parts:                                                             # each process: max(1, floor(r N_w)) of its candidates
        n_w, c_w = int(mask[h].sum()), int(cand(cov_dp)[h].sum())
        assert int(touched[h].sum()) == (min(max(1, int(r * n_w)), c_w) if r > 0 else 0)
    fr = lockstep([lambda red, h=h: kl_cov_loss(logp[h], old[h], adv[h], mask[h], kl_ratio=r, reduce=red)[1]["kl_cov_frac"] for h in parts])
    for h, f in zip(parts, fr):                                                 # each process: its max(1, floor(k N_w)) largest
        n_w = int(mask[h].sum())
        assert round(float(f) * n_w) == (min(max(1, int(r * n_w)), n_w) if r > 0 else 0)
