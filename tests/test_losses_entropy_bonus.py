"""The entropy bonus (TRL's `entropy_coef`, fixed or with `use_adaptive_entropy`) against TRL 1.16's own code path: the term
and its gradient from `GRPOTrainer._compute_loss` on the same tensors (grpo_trainer.py lines 3186-3245), the coefficient
path it steps, the gradient of its fused LM head's entropy (trl/kernels/chunked_logprob.py); then short runs on the micro
model: the coefficient moves by delta per optimizer step, a closed gate trains as no bonus, micro-batches change no
number, a resumed run is the uninterrupted one; the option names on the command line; a property: c stays in its bounds."""
import collections, json, types
import pytest
import torch
from hypothesis import given, settings, strategies as st

trl = pytest.importorskip("trl")
from rl_notes.losses import EntropyBonus, POLICY_LOSSES, Tokens, modify_tokens
from rl_notes.cli import main
from rl_notes.core import logprobs_from_hidden
from rl_notes.family import adapt_entropy_coef
from rl_notes.report import Meter
from rl_notes.trainconfig import Algo, TrainConfig, get_algo, trl_config

ENT_FIELDS = ("entropy_coef", "use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target")


# ---- TRL's _compute_loss on given tensors ----------------------------------------------------------------------------

def trl_stub(algo:Algo, loss_type:str="dapo", grad_accum:int=1, quantile:float=1.0):
    "A stand-in GRPOTrainer (one process, beta 0) carrying TRL's entropy-bonus state from `algo`, for `trl.GRPOTrainer._compute_loss`."
    a = types.SimpleNamespace(delta=None, use_bias_correction_kl=True, steps_per_generation=grad_accum,
                              **{k: getattr(algo, k) for k in ENT_FIELDS if k not in ("entropy_coef", "use_adaptive_entropy")})
    acc = types.SimpleNamespace(num_processes=1, reduce=lambda t, reduction="sum": t, gather=lambda t: t, gather_for_metrics=lambda t: t,
                                sync_gradients=True, pad_across_processes=lambda t, dim=0, pad_index=0: t)
    s = types.SimpleNamespace(args=a, accelerator=acc, aux_loss_enabled=False, top_entropy_quantile=quantile, off_policy_mask_threshold=None,
                              importance_sampling_level="token", beta=0.0, loss_type=loss_type, epsilon_low=algo.eps_low, epsilon_high=algo.eps_high,
                              use_vllm=False, vllm_importance_sampling_correction=False, model=types.SimpleNamespace(training=True),
                              current_gradient_accumulation_steps=grad_accum, _metrics=collections.defaultdict(lambda: collections.defaultdict(list)),
                              max_completion_length=None,
                              # grpo_trainer.py lines 846-857: the bonus's state, as GRPOTrainer.__init__ sets it
                              entropy_coef=algo.entropy_coef, use_adaptive_entropy=algo.use_adaptive_entropy,
                              _entropy_bonus_enabled=algo.entropy_coef != 0.0 or algo.use_adaptive_entropy,
                              _last_world_entropy=float("inf"), _entropy_window_stats=None)
    s.get_high_entropy_mask = types.MethodType(trl.GRPOTrainer.get_high_entropy_mask, s)
    return s


def trl_loss(s, logp, ent, old, adv, mask, sync=True, bonus=True):
    "TRL 1.16's `GRPOTrainer._compute_loss` on `s` whose log-prob pass returns (`logp`, `ent`); `bonus=False`: the same call with the bonus off."
    B, T = logp.shape
    s.max_completion_length, s.accelerator.sync_gradients = T, sync
    s._get_per_token_logps_and_entropies = lambda *x, **k: (logp, ent, None)
    inputs = dict(prompt_ids=torch.zeros(B, 1, dtype=torch.long), prompt_mask=torch.ones(B, 1, dtype=torch.long),
                  completion_ids=torch.zeros(B, T, dtype=torch.long), completion_mask=mask.long(), advantages=adv, old_per_token_logps=old,
                  num_items_in_batch=mask.sum().float() * s.current_gradient_accumulation_steps)
    on = s._entropy_bonus_enabled
    s._entropy_bonus_enabled = on and bonus
    try: return trl.GRPOTrainer._compute_loss(s, None, inputs)
    finally: s._entropy_bonus_enabled = on


def tensors(seed:int, B:int=8, T:int=6, level:float=1.0):
    "(logp, entropies, old logp, advantages, mask) of a made-up batch; the entropies have mean about `level`."
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(B, T, generator=g) * 0.5 - 1.5
    logp = old + torch.randn(B, T, generator=g) * 0.3
    ent = level * 2 * torch.rand(B, T, generator=g)
    mask = torch.rand(B, T, generator=g) > 0.25; mask[:, 0] = True
    return logp, ent, old, torch.randn(B, generator=g), mask


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo", "dr_grpo"])
@pytest.mark.parametrize("coef", [0.01, 0.5, -0.2])
def test_fixed_bonus_equals_trls_code_path(loss_type, coef):
    "TRL's loss = its policy loss - coef x the token mean of the entropies whatever loss_type; rl_notes' policy loss + EntropyBonus.term is it, value and gradients."
    algo = get_algo("trl", loss_type=loss_type, entropy_coef=coef)
    logp, ent, old, adv, mask = tensors(1)
    lp, en = logp.clone().requires_grad_(), ent.clone().requires_grad_()
    theirs = trl_loss(trl_stub(algo, loss_type), lp, en, old, adv, mask)
    g_lp, g_en = torch.autograd.grad(theirs, (lp, en))
    lp2, en2 = logp.clone().requires_grad_(), ent.clone().requires_grad_()
    pol, _ = POLICY_LOSSES[algo.loss](algo, lp2, old, None, adv, mask, max_tokens=logp.shape[1], global_tokens=None)
    eb = EntropyBonus(algo)
    ours = pol + eb.term(en2, mask, None, None, float(mask.sum()))
    eb.step(None, mt := Meter())
    h_lp, h_en = torch.autograd.grad(ours, (lp2, en2))
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h_lp, g_lp, rtol=1e-5, atol=1e-7); torch.testing.assert_close(h_en, g_en, rtol=1e-6, atol=1e-9)
    # the term alone: TRL's loss with the bonus minus without it
    term = theirs.detach() - trl_loss(trl_stub(algo, loss_type), logp, ent, old, adv, mask, bonus=False)
    r = mt.result()
    assert r["entropy_bonus"] == pytest.approx(float(term), rel=1e-5, abs=1e-7) == pytest.approx(-coef * float(ent[mask].mean()), rel=1e-5)
    assert r["entropy_coef"] == coef


def test_bonus_on_the_high_entropy_tokens_equals_trls():
    "top_entropy_quantile < 1: TRL's effective_mask (grpo_trainer.py line 3192) is rl_notes' `keep` of the 80/20 modifier; the terms agree."
    algo = get_algo("trl", entropy_coef=0.1, top_entropy_quantile=0.3)
    logp, ent, old, adv, mask = tensors(2)
    en = ent.clone().requires_grad_()
    s = trl_stub(algo, quantile=0.3)
    term = trl_loss(s, logp, en, old, adv, mask) - trl_loss(s, logp, ent, old, adv, mask, bonus=False)
    (g,) = torch.autograd.grad(term, en)
    _, keep = modify_tokens(algo, Tokens(logp, old, None, ent, adv, mask))
    en2 = ent.clone().requires_grad_()
    ours = EntropyBonus(algo).term(en2, mask, keep, keep, float(mask.sum()))
    (h,) = torch.autograd.grad(ours, en2)
    assert 0 < int(keep.sum()) < int(mask.sum())
    torch.testing.assert_close(ours, term, rtol=1e-5, atol=1e-7); torch.testing.assert_close(h, g)
    assert (h[~keep] == 0).all()


def run_both(algo:Algo, batches:list, grad_accum:int=1):
    "The coefficient, the gate's entropy and each optimizer step's bonus term, stepped by TRL's _compute_loss and by EntropyBonus over `batches` (lists of micro-batches)."
    s, eb = trl_stub(algo, grad_accum=grad_accum), EntropyBonus(algo)
    out = []
    for micro in batches:
        assert len(micro) == grad_accum
        theirs = ours = 0.0
        N = float(sum(m.sum() for *_, m in micro))
        for k, (logp, ent, old, adv, mask) in enumerate(micro):
            sync = k == len(micro) - 1
            off = trl_loss(s, logp, ent, old, adv, mask, sync=sync, bonus=False)   # no state touched with the bonus off
            theirs += float(trl_loss(s, logp, ent, old, adv, mask, sync=sync) - off)
            ours += float(eb.term(ent, mask, None, None, N))
        eb.step(None, Meter())
        out.append(dict(trl=(s.entropy_coef, s._last_world_entropy, theirs), ours=(eb.coef, eb.last, ours)))
    return out


def test_adaptive_coefficient_path_equals_trls():
    "Entropies below, at and above the target, one micro-batch per optimizer step: TRL's coefficient, gate and term, step by step (lines 3206-3240)."
    algo = get_algo("trl", use_adaptive_entropy=True, entropy_target=0.8, entropy_coef_delta=0.05, entropy_coef_max=0.12)
    levels = [0.5, 0.5, 0.5, 0.5, 1.4, 1.4, 0.6, 1.4, 1.4, 1.4, 1.4, 0.5]
    out = run_both(algo, [[tensors(k, level=lv)] for k, lv in enumerate(levels)])
    coefs = [o["ours"][0] for o in out]
    for o in out:
        assert o["ours"][0] == pytest.approx(o["trl"][0], abs=1e-12) and o["ours"][1] == pytest.approx(o["trl"][1], rel=1e-6)
        assert o["ours"][2] == pytest.approx(o["trl"][2], rel=1e-5, abs=1e-8)
    assert out[0]["trl"][2] == 0.0                              # no bonus before the first measurement (line 853: inf)
    assert max(coefs) == 0.12 and min(coefs) == 0.0             # both bounds reached
    assert any(o["trl"][2] == 0.0 for o in out[5:]) and any(o["trl"][2] < 0 for o in out[1:])   # the gate shut and open


@pytest.mark.parametrize("equal_tokens", [True, False])
def test_adaptive_with_gradient_accumulation(equal_tokens):
    "Two micro-batches per optimizer step: TRL's controller reads the window's token mean (lines 3216-3230), as rl_notes; the term is TRL's when the micro-batches hold equal numbers of tokens, else rl_notes keeps the exact token mean of the step (TRL's comment, lines 3196-3197)."
    algo = get_algo("trl", use_adaptive_entropy=True, entropy_target=0.9, entropy_coef_delta=0.1)
    batches = []
    for k, lv in enumerate([0.5, 0.5, 1.5, 0.5, 0.5]):
        a, b = tensors(10 + k, level=lv), tensors(20 + k, level=lv)
        if equal_tokens: b = (*b[:4], a[4])                  # the same mask: equal token counts
        else: b = (*tensors(20 + k, level=2 * lv)[:4], b[4] & (torch.arange(6) < 3))   # fewer tokens, of higher entropy
        batches.append([a, b])
    out = run_both(algo, batches, grad_accum=2)
    for o in out:
        assert o["ours"][0] == pytest.approx(o["trl"][0], abs=1e-12) and o["ours"][1] == pytest.approx(o["trl"][1], rel=1e-6)
    assert all((o["ours"][2] == 0.0) == (o["trl"][2] == 0.0) for o in out)   # the same gate
    terms = [(o["ours"][2], o["trl"][2]) for o in out if o["trl"][2] != 0.0]
    assert terms
    if equal_tokens: assert all(x == pytest.approx(y, rel=1e-5) for x, y in terms)
    else: assert all(x != pytest.approx(y, rel=1e-3) for x, y in terms)


def test_trls_fused_entropy_gradient_is_rl_notes():
    "The gradient the bonus sends back through TRL's fused LM head (trl/kernels/chunked_logprob.py lines 194-196 and 291-292: dH/dz_v = -p_v (log p_v + H)) equals rl_notes' hidden-state path."
    from trl.kernels.chunked_logprob import ChunkedLogProbFunction
    g = torch.Generator().manual_seed(3)
    N, H, V = 7, 5, 13
    hidden, weight = torch.randn(N, H, generator=g), torch.randn(V, H, generator=g)
    y, w = torch.randint(0, V, (N,), generator=g), torch.rand(N, generator=g)
    h1, w1 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp1, e1, *_ = ChunkedLogProbFunction.apply(h1, w1, None, y, 0.7, 4, None, 1.0, ("entropy",))
    h2, w2 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp2, e2 = logprobs_from_hidden(h2, w2, y, temperature=0.7, with_entropy=True)
    torch.testing.assert_close(e2, e1, rtol=1e-5, atol=1e-6); torch.testing.assert_close(lp2, lp1, rtol=1e-5, atol=1e-6)
    ga = torch.autograd.grad((w * e1).sum() + (w * lp1).sum() * 0.3, (h1, w1))
    gb = torch.autograd.grad((w * e2).sum() + (w * lp2).sum() * 0.3, (h2, w2))
    for a, b in zip(ga, gb): torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_defaults_are_grpoconfigs():
    c = trl.GRPOConfig(output_dir="/tmp/trl_ent", use_cpu=True, bf16=False, report_to="none")
    assert {k: getattr(Algo(), k) for k in ENT_FIELDS} == {k: getattr(c, k) for k in ENT_FIELDS}


@settings(max_examples=200, deadline=None)
@given(lo=st.floats(0, 2), width=st.floats(0, 2), start=st.floats(0, 1), delta=st.floats(0, 0.5), target=st.floats(0, 5),
       ents=st.lists(st.floats(0, 10), min_size=1, max_size=40))
def test_coefficient_stays_within_its_bounds(lo, width, start, delta, target, ents):
    hi = lo + width
    c = lo + start * width
    for h in ents:
        c = adapt_entropy_coef(c, h, target, delta, lo, hi)
        assert lo <= c <= hi


@settings(max_examples=25, deadline=None)
@given(ents=st.lists(st.sampled_from([0.3, 0.6, 0.9, 1.2]), min_size=1, max_size=12), delta=st.sampled_from([0.01, 0.2, 0.5]))
def test_coefficient_path_equals_trls_property(ents, delta):
    "Any sequence of step entropies: EntropyBonus's coefficient after each step is TRL's, and stays in [min, max]."
    algo = get_algo("trl", use_adaptive_entropy=True, entropy_target=0.7, entropy_coef_delta=delta, entropy_coef_min=0.1, entropy_coef=0.3,
                    entropy_coef_max=0.6)
    for o in run_both(algo, [[tensors(k, level=lv)] for k, lv in enumerate(ents)]):
        assert o["ours"][0] == pytest.approx(o["trl"][0], abs=1e-12) and 0.1 <= o["ours"][0] <= 0.6


# ---- short runs on the micro model --------------------------------------------------------------------------------------

def small(micro, **kw):
    return dict(dict(model=micro, task_kw=dict(max_digits=2, scratchpad=False), steps=4, n_prompts=4, group_size=4, max_new_tokens=3,
                     n_train=500, n_eval=4, eval_every=2, save_every=2, progress=False, threads=1), **kw)

def strip(rows): return [{k: v for k, v in r.items() if not k.startswith("time")} for r in rows]


def test_coefficient_moves_by_delta_per_optimizer_step(micro_sft, tmp_path, capsys):
    "From the command line, TRL's spellings; a target above every entropy: c grows by delta at each of the 2 optimizer steps per RL step (the row logs their mean); the doctor knows the new metrics."
    from rl_notes.doctor import KNOWN_UNUSED, to_series
    d = 0.01
    code = main(["train", "--model", micro_sft, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false", "--num-generations", "4",
                 "--n-prompts", "4", "--n-minibatches", "2", "--max-completion-length", "3", "--max-steps", "4", "--n-eval", "4",
                 "--n-train", "500", "--quiet", "--threads", "1", "--output-dir", str(tmp_path / "run"),
                 "--use-adaptive-entropy", "--entropy-target", "10", "--entropy-coef-delta", str(d)])
    assert code == 0, capsys.readouterr().err
    every = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in every if r["step"] > 0]
    assert [r["entropy_coef"] for r in rows] == pytest.approx([(2 * k - 1 + 2 * k) * d / 2 for k in range(1, 5)], abs=1e-12)
    assert all(r["entropy_bonus"] < 0 for r in rows)
    # the first optimizer step applies nothing (no measurement yet), the second c = d: the row's mean is -d H_2 / 2
    assert -rows[0]["entropy_bonus"] < d * rows[0]["entropy"]
    _, unmapped = to_series(every, "rl_notes")
    assert "entropy_coef" in rows[0] and not [k for k in unmapped if not KNOWN_UNUSED["rl_notes"].match(k)], unmapped


def test_closed_gate_trains_as_no_bonus(micro_sft, tmp_path):
    "Target 0 nats: the gate never opens, so the run computes what a run without the bonus computes (the coefficient falls to its floor)."
    from rl_notes.trainer import train
    base = train(TrainConfig(out_dir=str(tmp_path / "base"), algo=get_algo("grpo"), **small(micro_sft)))
    algo = get_algo("grpo", use_adaptive_entropy=True, entropy_coef=0.03, entropy_target=0.0, entropy_coef_delta=0.01)
    gated = train(TrainConfig(out_dir=str(tmp_path / "gated"), algo=algo, **small(micro_sft)))
    keys = ("loss", "grad_norm", "entropy", "reward", "heldout_acc")
    assert [{k: r.get(k) for k in keys} for r in gated] == [{k: r.get(k) for k in keys} for r in base]
    assert [r["entropy_coef"] for r in gated[1:]] == pytest.approx([0.02, 0.01, 0.0, 0.0], abs=1e-12)
    assert all(r["entropy_bonus"] == 0.0 for r in gated[1:]) and "entropy_coef" not in base[1]


@pytest.mark.many_runs
@pytest.mark.parametrize("kw", [dict(entropy_coef=0.05), dict(entropy_coef=0.05, top_entropy_quantile=0.5),
                                dict(use_adaptive_entropy=True, entropy_target=10.0, entropy_coef_delta=0.05)])
def test_micro_batches_change_no_number(micro_sft, tmp_path, kw):
    "micro_batch_size is run control: one step in micro-batches of 3 (16 rows: 3, 3, 3, 3, 3, 1 per minibatch of 8: 3, 3, 2) is the step without them."
    from rl_notes.trainer import train
    cfg = dict(algo=get_algo("grpo", beta=0.0, agg="seq-mean-token-mean", **kw), n_minibatches=2, **small(micro_sft, steps=1, n_eval=0))
    r0 = train(TrainConfig(out_dir=str(tmp_path / "whole"), **cfg))[-1]
    r3 = train(TrainConfig(out_dir=str(tmp_path / "micro"), micro_batch_size=3, **cfg))[-1]
    assert r3["micro_batches"] == 3 and r0["entropy_bonus"] < 0
    for k in ("loss", "grad_norm", "entropy_bonus", "entropy_coef", "entropy"):
        assert r3[k] == pytest.approx(r0[k], rel=1e-5, abs=1e-8), k


def test_hidden_state_path_carries_the_bonus(micro_sft, tmp_path):
    "logprob_path='hidden' (the entropy from the hidden states and the head, tile by tile) gives the bonus's gradient of the logits path."
    from rl_notes.trainer import train
    cfg = dict(algo=get_algo("grpo", beta=0.0, entropy_coef=0.5), **small(micro_sft, steps=1, n_eval=0))
    a = train(TrainConfig(out_dir=str(tmp_path / "logits"), logprob_path="logits", **cfg))[-1]
    b = train(TrainConfig(out_dir=str(tmp_path / "hidden"), logprob_path="hidden", **cfg))[-1]
    off = train(TrainConfig(out_dir=str(tmp_path / "off"), logprob_path="logits", **{**cfg, "algo": get_algo("grpo", beta=0.0)}))[-1]
    for k in ("grad_norm", "entropy_bonus", "entropy", "loss"): assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-7), k
    assert a["grad_norm"] != pytest.approx(off["grad_norm"], rel=1e-3)                     # the bonus moved the gradient


@pytest.mark.many_runs
@pytest.mark.parametrize("target", [2.4, 10.0])
def test_resume_is_exact(micro_sft, tmp_path, target):
    "Killed after step 3 (checkpoint at 2) and resumed: the rows are the uninterrupted run's; the checkpoint holds c and the gate's entropy."
    from rl_notes.trainer import train
    algo = get_algo("grpo", use_adaptive_entropy=True, entropy_coef=0.05, entropy_target=target, entropy_coef_delta=0.02)
    kw = small(micro_sft, algo=algo, steps=5, n_minibatches=2)
    full = train(TrainConfig(out_dir=str(tmp_path / "full"), **kw))
    cut = train(TrainConfig(out_dir=str(tmp_path / "cut"), stop_at=3, **kw))
    assert cut[-1]["step"] == 3
    st = json.loads((tmp_path / "cut" / "ckpt" / "state.json").read_text())
    assert st["step"] == 2 and 0.0 <= st["extra"]["entropy_coef"] <= 1.0 and st["extra"]["entropy_last"] > 0   # c and the gate's entropy
    resumed = train(TrainConfig(out_dir=str(tmp_path / "cut"), resume=True, **kw))
    assert strip(resumed) == strip(full)
    assert any(r.get("entropy_bonus", 0) < 0 for r in full)                  # the bonus acted
    if target < 5: assert len({round(r["entropy_coef"], 9) for r in full[1:]}) > 1


# ---- the command line and TRL's names ---------------------------------------------------------------------------------

def test_trl_spellings_on_the_command_line(cli_cfg):
    code, cfg, _, err = cli_cfg("--entropy-coef", "0.01")
    assert code == 0 and (cfg.algo.entropy_coef, cfg.algo.use_adaptive_entropy) == (0.01, False), err
    code, cfg, _, err = cli_cfg("--use_adaptive_entropy", "--entropy_target", "1.5", "--entropy-coef-delta", "0.01", "--entropy-coef-max", "0.5")
    assert code == 0, err
    assert [getattr(cfg.algo, k) for k in ENT_FIELDS] == [0.0, True, 0.0, 0.5, 0.01, 1.5]
    code, cfg, _, err = cli_cfg("--use-adaptive-entropy", "false", "--set", "entropy_coef=0.02")
    assert code == 0 and (cfg.algo.entropy_coef, cfg.algo.use_adaptive_entropy) == (0.02, False), err
    code, cfg, _, err = cli_cfg("--use-adaptive-entropy", "--entropy-coef", "2")
    assert code == 2 and "where use_adaptive_entropy starts, must lie in [entropy_coef_min, entropy_coef_max] = [0, 1]" in err
    code, cfg, _, err = cli_cfg("--entropy-coef-min", "0.5", "--entropy-coef-max", "0.1")
    assert code == 2 and "Algo.entropy_coef_min (0.5) must be <= Algo.entropy_coef_max (0.1)" in err


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit): main(["train", "--help"])
    out = capsys.readouterr().out
    for k in ENT_FIELDS: assert "--" + k.replace("_", "-") in out, k


def test_trl_config_and_the_config_json():
    c = trl_config("trl", model="m", entropy_coef=0.0, use_adaptive_entropy=True, entropy_target=1.0)
    assert (c.algo.use_adaptive_entropy, c.algo.entropy_target) == (True, 1.0)
    assert TrainConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
