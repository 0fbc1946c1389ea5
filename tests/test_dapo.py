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


# ---------------------------------------------------------------- fill="filtered": the RL trainer's batch, exactly
def _rollout(rnd, n, G, g):
    "A synthetic rl_notes.rollout.Rollout of n prompts x G responses, with a prompt and response width that vary by round."
    from rl_notes.rollout import Rollout
    P, T, B = int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(1, 6, (1,), generator=g)), n * G
    rm = (torch.arange(T) < torch.randint(1, T + 1, (B, 1), generator=g)).long()
    return Rollout(input_ids=torch.randint(1, 50, (B, P + T), generator=g), attention_mask=torch.cat([torch.ones(B, P, dtype=torch.long), rm], 1),
                   response_mask=rm, old_logp=-torch.rand(B, T, generator=g), truncated=torch.rand(B, generator=g) < 0.3,
                   response_text=[f"{rnd}:{i}" for i in range(B)], prompt_len=P, group_size=G, prompts=[f"p{rnd}:{j}" for j in range(n)])

def trainer_collect_ref(pieces, need, G, pad):
    "The RL trainer's `_Run.collect` assembly, restated: kept groups in order, then filler groups (latest round first)."
    from rl_notes.rollout import cat_rollouts
    chosen = [(p, g) for p in range(len(pieces)) for g in range(len(pieces[p][2])) if pieces[p][2][g]][:need]
    if len(chosen) < need:
        filler = [(p, g) for p in reversed(range(len(pieces))) for g in range(len(pieces[p][2])) if not pieces[p][2][g]]
        chosen += filler[:need - len(chosen)]
    ros, rw = [], []
    for p in range(len(pieces)):
        gs = [g for (q, g) in chosen if q == p]
        if not gs: continue
        rows = torch.tensor([g * G + j for g in gs for j in range(G)])
        ros.append(pieces[p][0].select(rows)); rw.append(pieces[p][1][rows])
    return (cat_rollouts(ros, pad) if len(ros) > 1 else ros[0]), torch.cat(rw)

@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.sampled_from([2, 3]), st.integers(1, 4), st.floats(0.0, 1.0), st.integers(0, 10 ** 6))
def test_dynamic_sample_fill_is_the_trainers_batch(n, G, max_rounds, p_inf, seed):
    "Rollout fields, rewards and order equal the trainer's own assembly; stats give its gen_rounds, filler_frac and round-0 metrics."
    import dataclasses
    from rl_notes.rollout import cat_rollouts
    g = torch.Generator().manual_seed(seed)
    need = n                                                       # the trainer asks for one round's worth of groups
    made = []
    for rnd in range(max_rounds):
        inf = torch.rand(n, generator=g) < p_inf
        r = torch.stack([torch.where(inf, 0.0, 1.0), torch.ones(n)], 1)[:, [j % 2 for j in range(G)]].reshape(-1)
        made.append((_rollout(rnd, n, G, g), r))
    # the trainer stops generating once it has `need` informative groups
    pieces, k = [], 0
    for ro, r in made:
        keep = filter_groups(r, G).view(n, G)[:, 0]
        pieces.append((ro, r, keep.tolist())); k += int(keep.sum())
        if k >= need: break
    ref_ro, ref_r = trainer_collect_ref(pieces, need, G, pad=0)
    rw, ro, st_ = dynamic_sample(lambda rnd: (made[rnd][1], made[rnd][0]), need, G, max_rounds=max_rounds, on_exhaust="partial",
                                 fill="filtered", concat=lambda parts: cat_rollouts(parts, 0))
    assert torch.equal(rw, ref_r)
    for f in dataclasses.fields(ro):
        a, b = getattr(ro, f.name), getattr(ref_ro, f.name)
        assert (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b), f.name
    assert st_["rounds"] == len(pieces)                             # the trainer's gen_rounds
    assert st_["filler_groups"] / need == (need - min(k, need)) / need   # its filler_frac
    assert st_["kept_groups"] + st_["filler_groups"] == need
    first = st_["first_round"]                                     # its round-0 metrics: the full, unfiltered batch
    assert first["batch"] is made[0][0] and torch.equal(first["rewards"], made[0][1])
    assert first["keep"].float().mean().item() == torch.tensor(pieces[0][2]).float().mean().item()   # kept_frac
