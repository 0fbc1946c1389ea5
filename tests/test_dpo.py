"""Tests for rl_notes.dpo: cross-checks against TRL 1.16's DPO / CPO(SimPO) loss code, and hypothesis properties.

TRL's DPO loss lives inside `DPOTrainer._compute_loss` (a method that also runs the model). We call that method
itself, unmodified, on a stub `self` whose "model" returns given per-token log-probs, with reference log-probs passed
as precomputed inputs. So the cross-check runs TRL's own loss and metric code, not a restatement of it. SimPO is
checked against `CPOTrainer.cpo_loss` the same way.
"""
import collections, math, types

import pytest
import torch
from hypothesis import given, settings, strategies as st

from rl_notes.dpo import (DPO_LOSS_TYPES, collate_pairs, concatenated_forward, dpo_loss, sequence_logps, simpo_loss)

trl_dpo_mod = pytest.importorskip("trl.trainer.dpo_trainer")


def _trl_dpo(token_logps, completion_mask, ref_chosen, ref_rejected, beta, loss_type, label_smoothing=0.0):
    """Run TRL 1.16 `DPOTrainer._compute_loss` on per-token log-probs.

    token_logps: (2B, T) log-probs of tokens 1..T ([chosen; rejected]); completion_mask: (2B, T+1) TRL's mask over
    input_ids (position 0 is the prompt). Returns (loss, metrics)."""
    class _Acc:
        device = torch.device("cpu")
        def gather_for_metrics(self, x): return x
        def gather(self, x): return x

    class _Model:
        training = True
        def __call__(self, **kw):
            z = torch.zeros(token_logps.shape)
            return types.SimpleNamespace(log_probs=token_logps * completion_mask[:, 1:], entropy=z, mean_logits=z,
                                         is_top1=torch.zeros(token_logps.shape, dtype=torch.bool))

    stub = types.SimpleNamespace(
        model=_Model(), accelerator=_Acc(), aux_loss_enabled=False, ld_alpha=None, precompute_ref_logps=True,
        f_divergence_type="reverse_kl", loss_types=[loss_type], loss_weights=[1.0], beta=beta,
        label_smoothing=label_smoothing, use_weighting=False, _metrics={"train": collections.defaultdict(list)},
        _total_train_tokens=0, _tp_size=1, args=None)
    ids = torch.zeros(completion_mask.shape, dtype=torch.long)
    inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), completion_mask=completion_mask,
                  ref_chosen_logps=ref_chosen, ref_rejected_logps=ref_rejected)
    loss = trl_dpo_mod.DPOTrainer._compute_loss(stub, stub.model, inputs, False)
    return loss, {k: v[-1] for k, v in stub._metrics["train"].items()}


def _random_pairs(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, T + 1, (2 * B,), generator=g)
    mask = (torch.arange(T)[None] < lens[:, None]).long()                      # (2B, T) answer tokens
    tok = -torch.rand(2 * B, T, generator=g, dtype=torch.float64) * 4          # (2B, T)
    ref_tok = tok + 0.5 * torch.randn(2 * B, T, generator=g, dtype=torch.float64)
    comp = torch.cat([torch.zeros(2 * B, 1, dtype=torch.long), mask], 1)       # TRL's mask includes the prompt slot
    return tok, ref_tok, mask, comp


METRIC_KEYS = ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"]


@pytest.mark.parametrize("loss_type,label_smoothing", [
    ("sigmoid", 0.0), ("hinge", 0.0), ("robust", 0.0), ("robust", 0.1), ("robust", 0.3), ("ipo", 0.0)])
@pytest.mark.parametrize("beta", [0.1, 0.5])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_trl_dpo(loss_type, label_smoothing, beta, seed):
    B, T = 6, 9
    tok, ref_tok, mask, comp = _random_pairs(B, T, seed)
    ref_seq = sequence_logps(ref_tok, mask, "sum")
    trl_loss, trl_m = _trl_dpo(tok, comp, ref_seq[:B], ref_seq[B:], beta, loss_type, label_smoothing)
    # TRL's ipo divides each log-ratio by the answer length: that is our ipo on mean-reduced log-probs
    red = "mean" if loss_type == "ipo" else "sum"
    seq, rseq = sequence_logps(tok, mask, red), sequence_logps(ref_tok, mask, red)
    loss, m = dpo_loss(seq[:B], seq[B:], rseq[:B], rseq[B:], beta=beta, loss_type=loss_type, label_smoothing=label_smoothing)
    torch.testing.assert_close(loss, trl_loss, rtol=1e-9, atol=1e-9)
    if loss_type != "ipo":  # TRL's metrics always use summed log-probs
        for k in METRIC_KEYS: assert math.isclose(m[k].item(), trl_m[k], rel_tol=1e-6, abs_tol=1e-7), k


def test_cdpo_matches_trl():
    """TRL 1.16's `sigmoid` no longer applies label smoothing (cDPO). Its `aot` loss is the cDPO formula applied to
    sorted log-ratios; with one pair sorting is the identity, so B=1 `aot` is cDPO. Each pair is checked alone."""
    tok, ref_tok, mask, comp = _random_pairs(5, 7, 3)
    seq, rseq = sequence_logps(tok, mask), sequence_logps(ref_tok, mask)
    for i in range(5):
        rows = [i, 5 + i]
        trl_loss, _ = _trl_dpo(tok[rows], comp[rows], rseq[i:i+1], rseq[5+i:6+i], 0.2, "aot", 0.25)
        loss, _ = dpo_loss(seq[i:i+1], seq[5+i:6+i], rseq[i:i+1], rseq[5+i:6+i], beta=0.2, label_smoothing=0.25)
        torch.testing.assert_close(loss, trl_loss)


def test_sigmoid_norm_is_mean_reduction():
    "TRL's `sigmoid_norm` (length-normalised DPO) is our sigmoid on mean-reduced log-probs: the notes' variant."
    B = 6
    tok, ref_tok, mask, comp = _random_pairs(B, 8, 5)
    seq, rseq = sequence_logps(ref_tok, mask), sequence_logps(ref_tok, mask, "mean")
    trl_loss, _ = _trl_dpo(tok, comp, seq[:B], seq[B:], 0.1, "sigmoid_norm")
    ms = sequence_logps(tok, mask, "mean")
    torch.testing.assert_close(dpo_loss(ms[:B], ms[B:], rseq[:B], rseq[B:])[0], trl_loss)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_simpo_matches_trl_cpo(label_smoothing):
    cpo = pytest.importorskip("trl.experimental.cpo.cpo_trainer")
    g = torch.Generator().manual_seed(0)
    c, r = -torch.rand(7, generator=g, dtype=torch.float64) * 3, -torch.rand(7, generator=g, dtype=torch.float64) * 3
    stub = types.SimpleNamespace(alpha=0.0, loss_type="simpo", simpo_gamma=0.7, beta=2.5, label_smoothing=label_smoothing,
                                 accelerator=types.SimpleNamespace(device=torch.device("cpu")))
    losses, cr, rr = cpo.CPOTrainer.cpo_loss(stub, c, r)
    loss, m = simpo_loss(c, r, beta=2.5, gamma=0.7, label_smoothing=label_smoothing)
    torch.testing.assert_close(loss, losses.mean())
    torch.testing.assert_close(m["rewards/chosen"], cr.mean()); torch.testing.assert_close(m["rewards/rejected"], rr.mean())


# ---------------------------------------------------------------- properties
logp = st.floats(-50, 0, allow_nan=False, allow_infinity=False, width=64)
pairs = st.integers(1, 8).flatmap(lambda n: st.tuples(*[st.lists(logp, min_size=n, max_size=n) for _ in range(4)]))
betas = st.floats(0.01, 2.0)


def _t(*xs): return [torch.tensor(x, dtype=torch.float64) for x in xs]


@settings(max_examples=60, deadline=None)
@given(pairs, betas)
def test_value_at_reference(p, beta):
    c, r, _, _ = _t(*p)
    assert math.isclose(dpo_loss(c, r, c, r, beta=beta)[0].item(), math.log(2), rel_tol=1e-12)
    assert math.isclose(dpo_loss(c, r, c, r, beta=beta, loss_type="robust", label_smoothing=0.3)[0].item(), math.log(2), rel_tol=1e-9)
    assert math.isclose(dpo_loss(c, r, c, r, beta=beta, loss_type="hinge")[0].item(), 1.0)
    assert math.isclose(dpo_loss(c, r, c, r, beta=beta, loss_type="ipo")[0].item(), 1 / (4 * beta ** 2), rel_tol=1e-12)


@settings(max_examples=60, deadline=None)
@given(pairs, betas, st.floats(-20, 20), st.floats(-20, 20), st.sampled_from(DPO_LOSS_TYPES))
def test_invariant_to_per_answer_constants(p, beta, a, b, loss_type):
    "Adding a constant to both log pi(y_w) and log pi_ref(y_w) (e.g. a shared prompt term) changes nothing."
    c, r, rc, rr = _t(*p)
    l1 = dpo_loss(c, r, rc, rr, beta=beta, loss_type=loss_type)[0]
    l2 = dpo_loss(c + a, r + b, rc + a, rr + b, beta=beta, loss_type=loss_type)[0]
    assert math.isclose(l1.item(), l2.item(), rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=60, deadline=None)
@given(pairs, betas)
def test_swap_and_gradient_weight(p, beta):
    c, r, rc, rr = _t(*p)
    c.requires_grad_(); r.requires_grad_()
    loss, m = dpo_loss(c, r, rc, rr, beta=beta)
    loss.backward()
    h = ((c - rc) - (r - rr)).detach()
    B = c.shape[0]
    torch.testing.assert_close(c.grad, -beta * torch.sigmoid(-beta * h) / B)       # weight sigmoid(-beta*h)
    torch.testing.assert_close(r.grad, beta * torch.sigmoid(-beta * h) / B)
    # swapping chosen and rejected: loss(h) - loss(-h) = -beta * mean(h)   [log sig(x) - log sig(-x) = x]
    swapped = dpo_loss(r.detach(), c.detach(), rr, rc, beta=beta)[0]
    assert math.isclose((loss - swapped).item(), -beta * h.mean().item(), rel_tol=1e-7, abs_tol=1e-9)
    torch.testing.assert_close(m["rewards/margins"], beta * h.mean())
    acc = (beta * (c - rc) > beta * (r - rr)).double().mean().item()           # fraction of pairs ranked right
    assert math.isclose(m["rewards/accuracies"].item(), acc, rel_tol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 12), st.integers(0, 10 ** 6))
def test_sequence_logps_properties(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, T, generator=g) < 0.6
    mask[:, 0] = True
    x = -torch.rand(B, T, generator=g, dtype=torch.float64)
    s, m = sequence_logps(x, mask), sequence_logps(x, mask, "mean")
    torch.testing.assert_close(s, m * mask.sum(-1))
    garbage = torch.where(mask, x, torch.full_like(x, float("nan")))             # masked values never matter
    torch.testing.assert_close(sequence_logps(garbage, mask), s)


# ---------------------------------------------------------------- model path
def test_concatenated_forward_matches_per_sequence(tiny_lm):
    lm = tiny_lm()
    prompts, chosen, rejected = [[1, 5, 6], [1, 7]], [[8, 9, 10, 11], [12]], [[13], [14, 15, 16, 17, 18, 19]]
    out = concatenated_forward(lm, collate_pairs(prompts, chosen, rejected))
    for side, answers in (("chosen", chosen), ("rejected", rejected)):
        for i, (p, a) in enumerate(zip(prompts, answers)):
            ids = torch.tensor([p + a])
            lp = lm(input_ids=ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            torch.testing.assert_close(out[f"{side}_logps"][i], lp[len(p) - 1:].sum(), rtol=1e-5, atol=1e-5)


def test_bad_inputs():
    z = torch.zeros(3)
    with pytest.raises(ValueError, match="chosen/rejected batch sizes differ"): dpo_loss(z, z[:2], z, z[:2])
    with pytest.raises(ValueError, match="`beta` must be > 0"): dpo_loss(z, z, z, z, beta=0.0)
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match="`beta` must be > 0 and finite"): dpo_loss(z, z, z, z, beta=bad)
        with pytest.raises(ValueError, match="`beta` must be > 0 and finite"): simpo_loss(z, z, beta=bad)
    for name, bad in (("chosen_logps", z.long()), ("rejected_logps", z > 0), ("ref_chosen_logps", z.int()), ("ref_rejected_logps", z.bool())):
        args = {**dict(chosen_logps=z, rejected_logps=z, ref_chosen_logps=z, ref_rejected_logps=z), name: bad}
        with pytest.raises(ValueError, match=f"`{name}` must be a floating-point tensor of log-probs, got {bad.dtype}"): dpo_loss(**args)
    with pytest.raises(ValueError, match="`token_logps` must be a floating-point tensor"): sequence_logps(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3))
    with pytest.raises(ValueError, match="unknown `loss_type`"): dpo_loss(z, z, z, z, loss_type="bco")
    with pytest.raises(ValueError, match="all-padding"): sequence_logps(torch.zeros(2, 3), torch.tensor([[1, 0, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="all-padding"): collate_pairs([[1]], [[]], [[2]])
    with pytest.raises(ValueError, match="chosen/rejected batch sizes differ"): collate_pairs([[1], [1]], [[2], [2]], [[3]])


# ---------------------------------------------------------------- training loop
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 20), st.integers(1, 25), st.integers(1, 6), st.integers(0, 10 ** 6))
def test_batch_indices_cover_each_epoch(n, bs, steps, seed):
    from rl_notes.preference import _batch_indices
    stream = sum((_batch_indices(n, bs, s, seed) for s in range(1, steps + 1)), [])
    assert len(stream) == bs * steps
    for e in range(len(stream) // n):                    # every full epoch is a permutation of the pairs
        assert sorted(stream[e * n:(e + 1) * n]) == list(range(n))
    assert _batch_indices(n, bs, steps, seed) == stream[-bs:]   # stateless: a step's batch depends on (n, bs, step, seed)


def _pairs(n, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda k: torch.randint(3, 40, (int(k),), generator=g).tolist()
    return [([1] + r(torch.randint(1, 4, (1,), generator=g)), r(torch.randint(1, 6, (1,), generator=g)),
             r(torch.randint(1, 6, (1,), generator=g))) for _ in range(n)]


def test_train_dpo_split_run_equals_uninterrupted(tmp_path, tiny_lm):
    "A run stopped at a step that is both saved and evaluated, then resumed, equals an uninterrupted one."
    from rl_notes.preference import train_dpo, DPOConfig
    pairs = _pairs(10, 0)
    cfg = lambda steps: DPOConfig(steps=steps, batch_size=4, lr=1e-2, eval_every=2, probe=4, save_every=2, nll_coef=0.5)
    a = tiny_lm(); ha = train_dpo(a, None, pairs, cfg(7), out_dir=str(tmp_path / "a"))
    b = tiny_lm(); train_dpo(b, None, pairs, cfg(4), out_dir=str(tmp_path / "b"))     # stops after 4 steps, as if killed
    b = tiny_lm(); hb = train_dpo(b, None, pairs, cfg(7), out_dir=str(tmp_path / "b"))  # a fresh process resumes
    assert hb == ha
    for pa, pb in zip(a.parameters(), b.parameters()): assert torch.equal(pa, pb)
    assert ha[0]["probe/loss"] == pytest.approx(math.log(2), abs=1e-6)
    with pytest.raises(ValueError, match="different run"): train_dpo(tiny_lm(), None, pairs[:9], cfg(7), out_dir=str(tmp_path / "b"))
