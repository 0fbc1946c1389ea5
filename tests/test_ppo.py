"Property tests for rl_notes.ppo: fast GAE == reference loop (float64), mask invariance, loss invariants."
import math
import pytest
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from rl_notes.core import lockstep
from rl_notes.ppo import gae, gae_reference, ppo_policy_loss, value_loss, explained_variance, terminal_rewards

SET = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

@st.composite
def gae_case(draw):
    B = draw(st.integers(1, 6)); T = draw(st.integers(1, 90))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(B, T, generator=g, dtype=torch.float64)
    v = torch.randn(B, T, generator=g, dtype=torch.float64)
    kind = draw(st.sampled_from(["ones", "random", "right_pad", "spans", "empty_rows"]))
    p = draw(st.floats(0.0, 0.9))
    if kind == "ones": m = torch.ones(B, T, dtype=torch.bool)
    elif kind == "random": m = torch.rand(B, T, generator=g) >= p
    elif kind == "right_pad":
        L = torch.randint(0, T + 1, (B,), generator=g); m = torch.arange(T)[None] < L[:, None]
    elif kind == "spans":   # tool-output spans inside the response plus right padding
        m = torch.ones(B, T, dtype=torch.bool)
        for b in range(B):
            for _ in range(int(torch.randint(0, 4, (1,), generator=g))):
                s = int(torch.randint(0, T, (1,), generator=g)); e = s + int(torch.randint(1, 10, (1,), generator=g))
                m[b, s:e] = False
            m[b, int(torch.randint(1, T + 1, (1,), generator=g)):] = False
    else:
        m = torch.rand(B, T, generator=g) >= p; m[0] = False
    gamma = draw(st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]))
    if draw(st.booleans()):
        lam = draw(st.sampled_from([0.0, 0.3, 0.9, 0.95, 1.0]))
    else:
        lam = torch.rand(B, generator=g, dtype=torch.float64)
        lam[torch.rand(B, generator=g) < 0.3] = 1.0
        lam[torch.rand(B, generator=g) < 0.2] = 0.0
    block = draw(st.sampled_from([2, 3, 8, 32, 64]))
    return r, v, m, gamma, lam, block

@SET
@given(gae_case())
def test_gae_matches_reference(case):
    r, v, m, gamma, lam, block = case
    a_ref, ret_ref = gae_reference(r, v, m, gamma, lam)
    a, ret = gae(r, v, m, gamma, lam, block=block)
    torch.testing.assert_close(a, a_ref, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(ret, ret_ref, atol=1e-10, rtol=1e-10)
    assert (a[~m] == 0).all() and (ret[~m] == 0).all()
    torch.testing.assert_close(ret[m], (a + v)[m])

@SET
@given(gae_case(), st.sampled_from([float("nan"), float("inf"), 1e30, -7.0]))
def test_masked_values_do_not_matter(case, junk):
    r, v, m, gamma, lam, block = case
    r2, v2 = r.masked_fill(~m, junk), v.masked_fill(~m, -junk)
    for f in (gae_reference, lambda *a: gae(*a, block=block)):
        a, ret = f(r, v, m, gamma, lam)
        a2, ret2 = f(r2, v2, m, gamma, lam)
        assert torch.equal(a, a2) and torch.equal(ret, ret2)

@SET
@given(gae_case())
def test_gae_limits(case):
    r, v, m, gamma, lam, block = case
    # lam = 1, gamma = 1: advantage = (sum of later unmasked rewards) - V
    a, _ = gae(r, v, m, 1.0, 1.0, block=block)
    mc = (r * m).flip(-1).cumsum(-1).flip(-1)
    torch.testing.assert_close(a[m], (mc - v)[m])
    # lam = 0: the one-step TD error with the next unmasked value
    a0, _ = gae(r, v, m, gamma, 0.0, block=block)
    B, T = r.shape
    for b in range(B):
        idx = m[b].nonzero().flatten().tolist()
        for k, t in enumerate(idx):
            vn = float(v[b, idx[k + 1]]) if k + 1 < len(idx) else 0.0
            assert math.isclose(float(a0[b, t]), float(r[b, t]) + gamma * vn - float(v[b, t]), abs_tol=1e-10)

def test_gae_float32_long_no_overflow():
    "float32 at T = 32768: finite, and within 2e-6 of float64 even at gamma*lam = 1 (where summing deltas would drift)."
    torch.manual_seed(0)
    B, T = 2, 32768
    r = 0.01 * torch.randn(B, T); r[:, -1] += 1.0; v = torch.rand(B, T); m = torch.ones(B, T, dtype=torch.bool)
    m[1, T // 3: T // 3 + 500] = False
    for gl in (0.99, 1.0):
        a, ret = gae(r, v, m, 1.0, gl)
        a64, _ = gae_reference(r.double(), v.double(), m, 1.0, gl)
        assert torch.isfinite(a).all() and torch.isfinite(ret).all()
        assert (a.double() - a64).abs().max() < 2e-6

def test_gae_half_inputs_and_bad_input():
    r, v, m = torch.randn(2, 5).half(), torch.randn(2, 5).half(), torch.ones(2, 5)
    a, _ = gae(r, v, m)
    assert a.dtype == torch.float32
    with pytest.raises(ValueError, match="`values` must have the shape"): gae(r, v[:, :2], m)
    with pytest.raises(ValueError, match="`gamma`"): gae(r, v, m, gamma=-0.1)
    with pytest.raises(ValueError, match="`lam`"): gae(r, v, m, lam=1.01)
    with pytest.raises(ValueError, match="`lam`"): gae(r, v, m, lam=torch.ones(3))

@SET
@given(st.integers(1, 5), st.integers(1, 20), st.floats(0.0, 0.5), st.floats(0.0, 0.5), st.integers(0, 10**6))
def test_policy_loss_gradient_zero_outside_clip(B, T, eps_low, eps_high, seed):
    g = torch.Generator().manual_seed(seed)
    logp = (0.5 * torch.randn(B, T, generator=g, dtype=torch.float64)).requires_grad_()
    old = torch.zeros(B, T, dtype=torch.float64)
    adv = torch.randn(B, T, generator=g, dtype=torch.float64)
    m = torch.rand(B, T, generator=g) > 0.2
    loss, mt = ppo_policy_loss(logp, old, adv, m, eps_low, eps_high, agg="seq-mean-token-sum")
    loss.backward()
    ratio = logp.detach().exp()
    frozen = m & (((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low)))
    live = m & ~frozen & (adv != 0) & ((ratio - (1 + eps_high)).abs() > 1e-9) & ((ratio - (1 - eps_low)).abs() > 1e-9)
    assert (logp.grad[frozen] == 0).all() and (logp.grad[live] != 0).all() and (logp.grad[~m] == 0).all()
    assert 0 <= float(mt["clipfrac"]) <= 1 and float(mt["approx_kl"]) >= 0

def test_value_loss_clip_and_ev():
    torch.manual_seed(0)
    ret = torch.randn(4, 6); old = ret + 0.5 * torch.randn(4, 6); m = torch.ones(4, 6, dtype=torch.bool)
    v = old.clone()
    l_plain, _ = value_loss(v, old, ret, m)
    l_clip, mt = value_loss(v, old, ret, m, clip=0.2)
    assert torch.allclose(l_plain, l_clip) and float(mt["vf_clipfrac"]) == 0     # V == V_old: clip inactive
    assert float(explained_variance(ret, ret, m)) == pytest.approx(1.0)


def meter_ev_ref(parts):
    "The RL trainer's `Meter.add_ev` + `Meter.result`, restated: token-weighted moments pooled over every minibatch of every process."
    s = {k: 0.0 for k in ("d", "d2", "y", "y2")}; w = 0.0
    for values, returns, mask in parts:
        m = mask.bool(); n = float(m.sum())
        d, y = (returns - values).double()[m], returns.double()[m]
        for k, x in (("d", d), ("d2", d * d), ("y", y), ("y2", y * y)): s[k] += float(x.mean()) * n if n else 0.0
        w += n
    if w == 0: return None
    mo = {k: v / w for k, v in s.items()}
    var_y = mo["y2"] - mo["y"] ** 2
    return 1 - (mo["d2"] - mo["d"] ** 2) / var_y if var_y > 1e-12 else None

@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.integers(1, 8), st.floats(0.0, 0.8), st.integers(0, 2 ** 31 - 1))
def test_explained_variance_reduce_equals_union_and_trainer_meter(W, n_mb, b, T, p_masked, seed):
    "W processes x n_mb minibatches: explained_variance(reduce=) of the union = the trainer's pooled moments (to float precision)."
    g = torch.Generator().manual_seed(seed)
    rows = [[(torch.randn(b, T, generator=g), torch.randn(b, T, generator=g) * 2 + 1, torch.rand(b, T, generator=g) >= p_masked)
             for _ in range(n_mb)] for _ in range(W)]
    cat = lambda k, rs: torch.cat([r[k] for r in rs])
    evs = lockstep([lambda red, rs=rs: explained_variance(cat(0, rs), cat(1, rs), cat(2, rs), reduce=red) for rs in rows])
    flat = [r for rs in rows for r in rs]
    whole = explained_variance(cat(0, flat), cat(1, flat), cat(2, flat))
    ref = meter_ev_ref(flat)
    for e in evs:
        if whole.isnan(): assert e.isnan()
        else: assert torch.allclose(e, whole, atol=1e-5)
        if ref is not None and not whole.isnan(): assert abs(float(e) - ref) <= 1e-4 * max(1.0, abs(ref))

def test_gae_block_and_chunk_are_checked():
    r, v, m = torch.randn(2, 40), torch.randn(2, 40), torch.rand(2, 40) > 0.3
    for bad in (0, 1, -4, 2.0, True):
        with pytest.raises(ValueError, match="`block` must be an int >= 2"): gae(r, v, m, block=bad)
    with pytest.raises(ValueError, match="`chunk_elems` must be an int >= 1"): gae(r, v, m, chunk_elems=0)
    for K in (2, 3, 5): assert torch.allclose(gae(r.double(), v.double(), m, block=K)[0], gae_reference(r.double(), v.double(), m)[0], atol=1e-10)

def test_terminal_rewards_shapes():
    m = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert terminal_rewards(torch.tensor([2., 3.]), m).tolist() == [[0, 2, 0], [0, 0, 0]]
    assert terminal_rewards(torch.tensor([2., 3.]), torch.zeros(2, 0)).shape == (2, 0)
    with pytest.raises(ValueError, match="`r` must be \\(B,\\) = \\(2,\\)"): terminal_rewards(torch.ones(3), m)
    with pytest.raises(ValueError, match="`mask` must be \\(B, T\\)"): terminal_rewards(torch.ones(2), m[0])
