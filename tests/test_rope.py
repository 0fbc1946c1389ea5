"""Tests for rl_notes.rope: property-based checks (hypothesis) and cross-checks against transformers' own RoPE code.

transformers is a runtime dependency; its `LlamaRotaryEmbedding`, `apply_rotary_pos_emb`, `ROPE_INIT_FUNCTIONS` and
`T5Attention._relative_position_bucket` are the references.
"""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from rl_notes.rope import (RopeEmbedding, RopeInit, T5RelativeBias, apply_rope, rope_cos_sin, rope_inv_freq,
                           t5_relative_bucket)

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
from transformers.models.t5.modeling_t5 import T5Attention

transformers.logging.set_verbosity_error()
FAST = settings(max_examples=25, deadline=None)


def _tables(T, D, dtype=torch.float64, base=10000.0, offset=0):
    inv = rope_inv_freq(D, base).inv_freq
    return rope_cos_sin(torch.arange(offset, offset + T), inv.double() if dtype == torch.float64 else inv, dtype=dtype)


# ---------------------------------------------------------------- properties (R1, R2, layouts, GQA, offsets)

@FAST
@given(half_d=st.integers(1, 16), m=st.integers(0, 100_000), n=st.integers(0, 100_000), shift=st.integers(0, 100_000),
       seed=st.integers(0, 2**16))
def test_score_depends_only_on_offset(half_d, m, n, shift, seed):
    "R1: <R(m)q, R(n)k> == <R(m+s)q, R(n+s)k> (float64 angles)."
    g = torch.Generator().manual_seed(seed)
    D = 2 * half_d
    q, k = torch.randn(1, 1, 1, D, generator=g, dtype=torch.float64), torch.randn(1, 1, 1, D, generator=g, dtype=torch.float64)
    inv = rope_inv_freq(D).inv_freq.double()
    def score(a, b):
        c, s = rope_cos_sin(torch.tensor([a, b]), inv, dtype=torch.float64)
        return (apply_rope(q, None, c, s)[0] * apply_rope(k, None, c, s, offset=1)[0]).sum()
    assert torch.allclose(score(m, n), score(m + shift, n + shift), atol=1e-8 * D)


@FAST
@given(B=st.integers(1, 3), H=st.integers(1, 4), T=st.integers(1, 12), half_d=st.integers(1, 12),
       layout=st.sampled_from(["half", "interleaved"]), seed=st.integers(0, 2**16))
def test_norm_preserved_and_layouts_permute(B, H, T, half_d, layout, seed):
    "R2 plus: interleaved == half under the even/odd permutation of dimensions."
    g = torch.Generator().manual_seed(seed)
    D = 2 * half_d
    x = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    c, s = _tables(T, D)
    y = apply_rope(x, None, c, s, layout=layout)[0]
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-10)
    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])
    yi = apply_rope(x, None, c, s, layout="interleaved")[0]
    assert torch.allclose(yi[..., perm], apply_rope(x[..., perm], None, c, s, layout="half")[0], atol=1e-12)


@FAST
@given(Hkv=st.sampled_from([1, 2, 4]), groups=st.integers(1, 3), T=st.integers(1, 10), offset=st.integers(0, 20),
       layout=st.sampled_from(["half", "interleaved"]), seed=st.integers(0, 2**16))
def test_offset_equals_slice_of_full(Hkv, groups, T, offset, layout, seed):
    "KV-cache offsets: rotating tokens offset.. equals the matching rows of rotating the whole prefix; GQA k works."
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, Hkv * groups, offset + T, 8, generator=g)
    k = torch.randn(2, Hkv, offset + T, 8, generator=g)
    c, s = rope_cos_sin(64, rope_inv_freq(8))
    fq, fk = apply_rope(q, k, c, s, layout=layout)
    tq, tk = apply_rope(q[:, :, offset:], k[:, :, offset:], c, s, layout=layout, offset=offset)
    assert torch.allclose(tq, fq[:, :, offset:], atol=1e-6) and torch.allclose(tk, fk[:, :, offset:], atol=1e-6)


def test_non_contiguous_inputs():
    "q coming from a (B, T, H, D) projection via transpose is handled (strided views, no copy needed)."
    x = torch.randn(2, 9, 4, 16).transpose(1, 2)          # (B, H, T, D), non-contiguous
    c, s = rope_cos_sin(9, rope_inv_freq(16))
    out = apply_rope(x, None, c, s)[0]
    assert torch.allclose(out, apply_rope(x.contiguous(), None, c, s)[0], atol=0)


# ---------------------------------------------------------------- transformers cross-checks

@pytest.mark.parametrize("head_dim,Hq,Hkv", [(64, 4, 2), (128, 8, 8), (32, 6, 1)])
def test_matches_transformers_llama(head_dim, Hq, Hkv):
    cfg = LlamaConfig(hidden_size=head_dim * Hq, num_attention_heads=Hq, num_key_value_heads=Hkv, max_position_embeddings=256)
    torch.manual_seed(0)
    q, k = torch.randn(2, Hq, 40, head_dim), torch.randn(2, Hkv, 40, head_dim)
    pid = torch.stack([torch.arange(40), torch.arange(100, 140)])
    hc, hs = LlamaRotaryEmbedding(cfg)(q, pid)
    hq, hk = apply_rotary_pos_emb(q, k, hc, hs)
    c, s = rope_cos_sin(pid, rope_inv_freq(head_dim))
    oq, ok = apply_rope(q, k, c, s)
    assert (oq - hq).abs().max() <= 1e-6 and (ok - hk).abs().max() <= 1e-6
    oq2, ok2 = apply_rope(q, k, hc, hs)
    assert (oq2 - hq).abs().max() <= 1e-6 and (ok2 - hk).abs().max() <= 1e-6


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_path_matches_small_path(layout, dtype, threads, monkeypatch):
    "Large tensors on one thread go through the per-head, blocked path (on several, one pass); both must equal the reference formula, per-row tables included."
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    torch.manual_seed(2)
    q = torch.randn(2, 1200, 3, 64, dtype=dtype).transpose(1, 2)                       # (B, H, T, D), non-contiguous
    pid = torch.stack([torch.arange(1200), torch.arange(1200) + 33])
    c, s = rope_cos_sin(pid, rope_inv_freq(64), dtype=dtype)                           # (B, T, D/2)
    out = apply_rope(q, None, c, s, layout=layout)[0]
    x1, x2 = (q[..., :32], q[..., 32:]) if layout == "half" else (q[..., 0::2], q[..., 1::2])
    cc, ss = c[:, None].float(), s[:, None].float()
    o1, o2 = x1.float() * cc - x2.float() * ss, x2.float() * cc + x1.float() * ss
    ref = torch.cat([o1, o2], -1) if layout == "half" else torch.stack([o1, o2], -1).flatten(-2)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert (out.float() - ref).abs().max() <= tol


def test_gradients_match_transformers():
    torch.manual_seed(1)
    cfg = LlamaConfig(hidden_size=128, num_attention_heads=4, num_key_value_heads=2)
    q, k = torch.randn(1, 4, 12, 32), torch.randn(1, 2, 12, 32)
    hc, hs = LlamaRotaryEmbedding(cfg)(q, torch.arange(12)[None])
    w_q, w_k = torch.randn_like(q), torch.randn_like(k)
    grads = []
    for fn in [lambda a, b: apply_rope(a, b, hc, hs), lambda a, b: apply_rotary_pos_emb(a, b, hc, hs)]:
        a, b = q.clone().requires_grad_(), k.clone().requires_grad_()
        oa, ob = fn(a, b); ((oa * w_q).sum() + (ob * w_k).sum()).backward()
        grads.append((a.grad, b.grad))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-6) and torch.allclose(grads[0][1], grads[1][1], atol=1e-6)


SCALINGS = [
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "linear", "factor": 8},
    {"rope_type": "dynamic", "factor": 2.0},
    {"rope_type": "dynamic", "factor": 1.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
    {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096, "beta_fast": 8, "beta_slow": 0.5},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024, "truncate": False},
    {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 1.0},
    {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 0.707, "mscale_all_dim": 1.0},
    {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024, "attention_factor": 0.9},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0, "original_max_position_embeddings": 1024},
]


@pytest.mark.parametrize("sc", SCALINGS, ids=lambda d: "-".join(f"{v}" for v in d.values()))
@pytest.mark.parametrize("dim,theta", [(64, 10000.0), (128, 500000.0), (16, 1e6)])
def test_scaling_matches_transformers(sc, dim, theta):
    "inv_freq and attention factor equal transformers' ROPE_INIT_FUNCTIONS for the same rope_parameters."
    L0 = 2048
    cfg = LlamaConfig(hidden_size=dim * 4, num_attention_heads=4, max_position_embeddings=L0,
                      rope_parameters={**sc, "rope_theta": theta})
    for seq_len in ([None, 1000, 5000, 70000] if sc["rope_type"] == "dynamic" else [None]):
        hinv, hatt = ROPE_INIT_FUNCTIONS[sc["rope_type"]](cfg, "cpu", seq_len=seq_len)
        ours = rope_inv_freq(dim, theta, sc, seq_len=seq_len, max_position_embeddings=L0)
        assert isinstance(ours, RopeInit)
        assert torch.allclose(ours.inv_freq, hinv, rtol=1e-6, atol=0), (ours.inv_freq - hinv).abs().max()
        assert math.isclose(ours.attention_factor, hatt, rel_tol=1e-6)


@pytest.mark.parametrize("sc", [None, {"rope_type": "linear", "factor": 3.0},
                                {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
                                {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 64}])
def test_rope_embedding_module_matches_llama(sc):
    cfg = LlamaConfig(hidden_size=128, num_attention_heads=4, max_position_embeddings=64,
                      rope_parameters={**(sc or {"rope_type": "default"}), "rope_theta": 10000.0})
    x = torch.randn(1, 4, 200, 32, dtype=torch.bfloat16)
    pid = torch.arange(200)[None]
    hc, hs = LlamaRotaryEmbedding(cfg)(x, pid)
    oc, os_ = RopeEmbedding(32, scaling=sc, max_position_embeddings=64)(x, pid)
    assert oc.dtype == torch.bfloat16 and torch.equal(oc, hc) and torch.equal(os_, hs)


def test_rope_embedding_is_parameter_free():
    assert sum(p.numel() for p in RopeEmbedding(128).parameters()) == 0 and not RopeEmbedding(128).state_dict()


# ---------------------------------------------------------------- T5 bucketed bias (R4)

@FAST
@given(bidirectional=st.booleans(), nb=st.sampled_from([8, 16, 32, 64]), md=st.sampled_from([16, 64, 128, 1000]),
       seed=st.integers(0, 2**16))
def test_t5_bucket_matches_transformers(bidirectional, nb, md, seed):
    rel = torch.randint(-5000, 5000, (2000,), generator=torch.Generator().manual_seed(seed))
    exact = (nb // 2 if bidirectional else nb) // 2
    if md <= exact:   # transformers returns negative "buckets" (a NaN/inf cast to long) here; we refuse
        with pytest.raises(ValueError, match="`max_distance` must exceed the exact range"): t5_relative_bucket(rel, bidirectional, nb, md)
        assert (T5Attention._relative_position_bucket(rel, bidirectional, nb, md) < 0).any()
        return
    assert torch.equal(t5_relative_bucket(rel, bidirectional, nb, md), T5Attention._relative_position_bucket(rel, bidirectional, nb, md))


def test_t5_bias_constant_beyond_max_distance():
    bias = T5RelativeBias(4)(1, 3001, offset=3000)[0, :, 0]        # (H, 3001), distance 3000 - j
    far = bias[:, : 3000 - 127]
    assert torch.equal(far, far[:, :1].expand_as(far))
    assert sum(p.numel() for p in T5RelativeBias(4).parameters()) == 32 * 4


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("call,msg", [
    (lambda: rope_inv_freq(7), "`dim` must be a positive even int"),
    (lambda: rope_inv_freq(0), "`dim` must be a positive even int"),
    (lambda: rope_inv_freq(8, base=0), "`base` must be a positive"),
    (lambda: rope_inv_freq(8, base=float("nan")), "`base` must be a positive"),
    (lambda: rope_inv_freq(8, scaling={"rope_type": "longrope", "factor": 2.0}), "unknown `scaling` rope_type"),
    (lambda: rope_inv_freq(8, scaling={"rope_type": "dynamic", "factor": 0.0}), "`factor` must be a positive"),
    (lambda: rope_inv_freq(8, scaling={"rope_type": "dynamic", "factor": 2.0}), "original_max_position_embeddings"),
    (lambda: rope_inv_freq(8, scaling={"rope_type": "llama3", "factor": 2.0, "original_max_position_embeddings": 8}),
     "needs the key 'low_freq_factor'"),
    (lambda: rope_cos_sin(torch.zeros(2, 2, 2, dtype=torch.long), rope_inv_freq(8)), "`positions` must be an integer tensor"),
    (lambda: rope_cos_sin(torch.tensor([2 ** 25]), rope_inv_freq(8)), "`positions` must be < 2**24"),
    (lambda: apply_rope(torch.randn(1, 2, 3, 5), None, torch.ones(3, 2), torch.ones(3, 2)), "head dimension must be even"),
    (lambda: apply_rope(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 6), torch.ones(3, 2), torch.ones(3, 2)), "head dim of `q`"),
    (lambda: apply_rope(torch.randn(1, 2, 3, 4), None, torch.ones(3, 2), torch.ones(3, 2), offset=1), "beyond the precomputed `cos` cache"),
    (lambda: apply_rope(torch.randn(1, 2, 3, 4), None, torch.ones(3, 2), torch.ones(3, 2), offset=-1), "`offset` must be a non-negative int"),
    (lambda: apply_rope(torch.randn(2, 3, 4), None, torch.ones(3, 2), torch.ones(3, 2)), "`q` must be (B, H, T, D)"),
    (lambda: apply_rope(torch.ones(1, 2, 3, 4, dtype=torch.long), None, torch.ones(3, 2), torch.ones(3, 2)), "`q` must be a floating-point tensor, got torch.int64"),
    (lambda: apply_rope(torch.ones(1, 2, 3, 4, dtype=torch.bool), None, torch.ones(3, 2), torch.ones(3, 2)), "`q` must be a floating-point tensor, got torch.bool"),
    (lambda: apply_rope(torch.randn(1, 2, 3, 4), torch.ones(1, 2, 3, 4, dtype=torch.int32), torch.ones(3, 2), torch.ones(3, 2)), "`k` must be a floating-point tensor, got torch.int32"),
    (lambda: apply_rope(torch.randn(1, 2, 3, 4), None, torch.ones(3, 2, dtype=torch.long), torch.ones(3, 2)), "`cos` must be a floating-point tensor"),
    (lambda: rope_cos_sin(-1, rope_inv_freq(8)), "`positions` as an int is a length T >= 0"),
    (lambda: rope_inv_freq(8, seq_len=2.5), "`seq_len` must be None or an int >= 0"),
    (lambda: rope_inv_freq(8, scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8, "beta_fast": -3}), "`beta_fast` must be a positive"),
])
def test_bad_input(call, msg):
    with pytest.raises(ValueError, match=None) as e: call()
    assert msg in str(e.value), str(e.value)


def test_dynamic_rope_dim_2_is_finite_and_unscaled():
    "dim == 2: one pair, theta_0 = b^0 = 1 at every length; transformers' exponent d/(d-2) divides by zero there."
    sc = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 8}
    for L in (None, 4, 8, 9, 100, 10 ** 6):
        assert torch.equal(rope_inv_freq(2, scaling=sc, seq_len=L).inv_freq, torch.ones(1))
    with pytest.raises(ZeroDivisionError):   # what transformers does with the same config
        ROPE_INIT_FUNCTIONS["dynamic"](LlamaConfig(hidden_size=2, num_attention_heads=1, max_position_embeddings=8,
                                                   rope_scaling={"rope_type": "dynamic", "factor": 4.0}), "cpu", seq_len=100)
    emb = RopeEmbedding(2, scaling=sc, max_position_embeddings=8)
    cos, sin = emb(torch.zeros(1, 50, 2), torch.arange(50)[None])
    assert torch.isfinite(cos).all() and torch.allclose(cos[0, :, 0], torch.arange(50).float().cos(), atol=1e-6)
