"""TRL's spellings on the command line (underscores, booleans, --bf16, --delta, --importance-sampling-level, ...), every
GRPOConfig option mapped, ignored with a line or refused with a line; the `trl` preset against `GRPOConfig()`; the
learning-rate schedules against transformers'; TRL's batch arithmetic against GRPOConfig's own; scale_rewards="batch"."""
import dataclasses, enum, math
import pytest
import torch

trl = pytest.importorskip("trl")
from rl_notes import cli
from rl_notes.cli import main
from rl_notes.configs import TRL_NAMES, TRL_OTHER, trl_batch
from rl_notes.trainconfig import TrainConfig, TRL_TRAIN, get_algo, trl_config


def grpo_config(**kw):
    "GRPOConfig on a CPU (its bf16 default refuses a machine without a GPU)."
    return trl.GRPOConfig(output_dir="/tmp/trl_day2", use_cpu=True, bf16=False, report_to="none", **kw)


def one_line(err:str) -> str:
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_underscores_and_dashes(cli_cfg):
    for spelled in (["--num_generations", 4, "--max_completion_length", 32], ["--num-generations", 4, "--max-completion-length", 32],
                    ["--num_generations=4", "--max-completion_length=32"]):
        code, cfg, out, err = cli_cfg(*spelled)
        assert code == 0, err
        assert (cfg.group_size, cfg.max_new_tokens) == (4, 32)


@pytest.mark.parametrize("args, want", [
    ([], False), (["--mask-truncated-completions"], True), (["--mask-truncated-completions", "True"], True),
    (["--mask_truncated_completions", "false"], False), (["--mask-truncated-completions", "1"], True),
    (["--mask-truncated-completions", "0"], False), (["--mask-truncated-completions", "False"], False)])
def test_boolean_spellings(cli_cfg, args, want):
    code, cfg, out, err = cli_cfg(*args)
    assert code == 0, err
    assert cfg.algo.overlong_filter is want


def test_boolean_values_of_fields_and_scale_rewards(cli_cfg):
    code, cfg, _, err = cli_cfg("--gradient-checkpointing", "True", "--scale-rewards", "True")
    assert code == 0 and cfg.gradient_checkpointing is True and cfg.algo.adv == "group", err
    code, cfg, _, err = cli_cfg("--gradient_checkpointing", "false", "--scale-rewards", "False")
    assert code == 0 and cfg.gradient_checkpointing is False and cfg.algo.adv == "group-mean-only", err
    code, cfg, _, err = cli_cfg("--no-progress")
    assert code == 0 and cfg.progress is False
    code, cfg, _, err = cli_cfg("--progress", "false")
    assert code == 0 and cfg.progress is False
    code, cfg, _, err = cli_cfg()                                                   # the speed levers: on unless turned off
    assert code == 0 and cfg.compact_generation and cfg.share_prompt and cfg.trim_micro_batches, err
    code, cfg, _, err = cli_cfg("--no-compact-generation", "--share-prompt", "false", "--no-trim-micro-batches")
    assert code == 0 and not (cfg.compact_generation or cfg.share_prompt or cfg.trim_micro_batches), err
    code, _, _, err = cli_cfg("--mask-truncated-completions", "maybe")
    assert code == 2 and "expected true or false" in one_line(err)


def test_bf16_fp16(cli_cfg):
    code, cfg, _, err = cli_cfg("--bf16")                                   # TRL's meaning: mixed precision, float32 weights
    assert code == 0 and (cfg.dtype, cfg.mixed_precision) == ("float32", "bf16"), err
    code, cfg, _, err = cli_cfg("--bf16", "false")
    assert code == 0 and (cfg.dtype, cfg.mixed_precision) == ("float32", None), err
    code, cfg, _, err = cli_cfg("--bf16", "--dtype", "float32")
    assert code == 0 and cfg.mixed_precision == "bf16", err
    code, _, _, err = cli_cfg("--bf16", "--dtype", "bfloat16")
    assert code == 2 and "--bf16 is mixed precision" in one_line(err) and "give one" in one_line(err)
    code, cfg, _, err = cli_cfg("--fp16")
    assert code == 0 and (cfg.dtype, cfg.mixed_precision) == ("float32", "fp16"), err


def test_importance_sampling_level(cli_cfg):
    code, cfg, _, err = cli_cfg("--importance-sampling-level", "sequence")
    assert code == 0 and cfg.algo.loss == "gspo" and cfg.algo.eps_low == 0.2, err     # the preset's clip, GSPO's ratio
    code, cfg, _, err = cli_cfg("--importance_sampling_level", "token", "--algo", "cispo")
    assert code == 0 and cfg.algo.loss == "cispo", err                                 # token: the preset's own loss
    code, _, _, err = cli_cfg("--importance-sampling-level", "sequence", "--algo", "cispo")
    assert code == 2 and "this preset's loss is 'cispo'" in one_line(err)


def test_delta_is_the_dual_clip(cli_cfg):
    code, cfg, _, err = cli_cfg("--delta", "1.5")
    assert code == 0 and cfg.algo.dual_clip == 1.5, err
    code, _, _, err = cli_cfg("--delta", "1.1")
    assert code == 2 and "delta > 1 + epsilon_high (1.2)" in one_line(err)


def test_delta_loss_equals_trl_two_sided_clip():
    "TRL's two-sided clip (grpo_trainer.py `_compute_loss`: coef_1 capped at delta in the unclipped term) and rl_notes' dual clip: same loss and gradient."
    from rl_notes.losses import POLICY_LOSSES
    g = torch.Generator().manual_seed(0)
    B, T, eps, delta = 6, 5, 0.2, 1.5
    logp = (torch.randn(B, T, generator=g) * 0.6 - 1).requires_grad_()
    old = torch.randn(B, T, generator=g) * 0.6 - 1
    adv = torch.randn(B, generator=g)
    mask = torch.rand(B, T, generator=g) > 0.2
    algo = get_algo("trl", delta=delta)
    loss, _ = POLICY_LOSSES["clip"](algo, logp, old, None, adv, mask, max_tokens=T, global_tokens=None)
    (grad,) = torch.autograd.grad(loss, logp)
    # TRL's formula, written out: -min(min(r, delta) A, clip(r, 1 - eps, 1 + eps) A), token mean (loss_type dapo)
    lp = logp.detach().clone().requires_grad_()
    r = torch.exp(lp - old)
    a = adv[:, None]
    per = -torch.min(torch.clamp(r, max=delta) * a, torch.clamp(r, 1 - eps, 1 + eps) * a)
    ref = (per * mask).sum() / mask.sum()
    (ref_grad,) = torch.autograd.grad(ref, lp)
    assert ((r > delta) & (a < 0) & mask).any()                         # the cap acts on some tokens
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_sequence_level_equals_trl(agg):
    "importance_sampling_level='sequence' (one ratio per response, exp of the mean token log-ratio, as (B, 1)) and rl_notes' gspo loss."
    from rl_notes.losses import POLICY_LOSSES
    g = torch.Generator().manual_seed(1)
    B, T = 6, 5
    logp = (torch.randn(B, T, generator=g) * 0.3 - 1).requires_grad_()
    old = torch.randn(B, T, generator=g) * 0.3 - 1
    adv, mask = torch.randn(B, generator=g), torch.rand(B, T, generator=g) > 0.2
    algo = get_algo("grpo", beta=0.0, agg=agg, importance_sampling_level="sequence")
    loss, _ = POLICY_LOSSES[algo.loss](algo, logp, old, None, adv, mask, max_tokens=T, global_tokens=None)
    (grad,) = torch.autograd.grad(loss, logp)
    lp = logp.detach().clone().requires_grad_()
    m = mask.float()
    s = torch.exp(((lp - old) * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)    # (B, 1)
    per = -torch.min(s * adv[:, None], torch.clamp(s, 0.8, 1.2) * adv[:, None]).expand(B, T)
    ref = (per * m).sum() / m.sum() if agg == "token-mean" else ((per * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    (ref_grad,) = torch.autograd.grad(ref, lp)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)


def test_logging_steps_and_reward_weights(cli_cfg, tmp_path):
    code, cfg, out, err = cli_cfg("--logging-steps", "10")
    assert code == 0, err
    assert "rl_notes: ignored, no meaning here: --logging-steps 10 (rl_notes writes one metric row every RL step" in out
    (tmp_path / "r.py").write_text("def a(completions, **kw): return [1.0] * len(completions)\ndef b(completions, **kw): return [0.0] * len(completions)\n")
    rw = ["--reward", f"{tmp_path / 'r.py'}:a", "--reward", f"{tmp_path / 'r.py'}:b", "--task", "addition"]
    code, cfg, _, err = cli_cfg(*rw, "--reward_weights", "0.5", "2")
    assert code == 0 and cfg.reward_weights == [0.5, 2.0], err
    code, _, _, err = cli_cfg(*rw, "--reward-weights", "0.5")
    assert code == 2 and "reward_weights has 1 weights for 2 reward functions" in one_line(err)
    code, _, _, err = cli_cfg("--reward", f"{tmp_path / 'r.py'}:a=0.5", "--task", "addition", "--reward-weights", "0.5")
    assert code == 2 and "give the reward weights once" in one_line(err)


def test_max_prompt_length_and_vllm_are_refused_in_one_line(cli_cfg):
    code, _, _, err = cli_cfg("--max-prompt-length", "128")
    assert code == 2 and "TRL 1.16 has no such option and truncates no prompt" in one_line(err)
    code, _, _, err = cli_cfg("--use_vllm")
    assert code == 2 and "--use-vllm (TRL's use_vllm): rl_notes samples with its own sampler" in one_line(err)
    code, _, out, err = cli_cfg("--use-vllm", "false")                     # switched off: nothing asked
    assert code == 0 and "--use-vllm false: nothing to turn off" in out, err
    code, cfg, _, err = cli_cfg("--top-p", "0.9")                         # truncated sampling with the log-probs renormalised on its support
    assert code == 0 and cfg.top_p == 0.9, err


def test_ref_model_sync_needs_trls_switch(cli_cfg):
    code, cfg, out, err = cli_cfg("--beta", "0.1", "--ref-model-sync-steps", "3")
    assert code == 0 and cfg.algo.ref_reset_every == 0, err
    assert "act only with sync_ref_model=True" in out
    code, cfg, _, err = cli_cfg("--beta", "0.1", "--ref-model-sync-steps", "3", "--sync-ref-model")
    assert code == 0 and (cfg.algo.ref_reset_every, cfg.algo.ref_mixup_alpha) == (3, 0.6), err
    code, cfg, _, err = cli_cfg("--beta", "0.1", "--set", "ref_reset_every=3")          # rl_notes' own name acts alone
    assert code == 0 and (cfg.algo.ref_reset_every, cfg.algo.ref_mixup_alpha) == (3, 1.0), err


def _sample_value(f):
    "A value of GRPOConfig field `f` for the command line: its default where it is a plain one, else a valid example or none (a bare flag)."
    examples = {"output_dir": None, "delta": "1.5", "reward_weights": None, "generation_batch_size": "16", "steps_per_generation": "2",
                "report_to": "none", "max_prompt_length": "128", "max_steps": "3"}
    if f.name in examples: return examples[f.name]
    d = f.default
    if isinstance(d, enum.Enum): d = d.value
    return str(d) if isinstance(d, (bool, int, float, str)) and d != "" else None


def test_every_grpoconfig_option_is_mapped_ignored_or_refused(cli_cfg):
    tf = {f.name for f in dataclasses.fields(TrainConfig)}
    own = set(cli._TRL_OWN)
    for f in dataclasses.fields(trl.GRPOConfig):
        known = f.name in TRL_NAMES or f.name in TRL_OTHER or f.name in tf or f.name in own
        assert known, f"GRPOConfig.{f.name} is neither mapped, ignored nor refused"
        if f.name in ("output_dir", "reward_weights"): continue              # given by the fixture / tested above
        v = _sample_value(f)
        code, cfg, out, err = cli_cfg(f"--{f.name}", *([v] if v is not None else []))
        assert "unrecognized arguments" not in err and "ambiguous option" not in err, (f.name, err)
        opt = "--" + f.name.replace("_", "-")
        kind = TRL_OTHER[f.name].kind if f.name in TRL_OTHER else "mapped"
        if f.name == "optim" and v in ("adamw_torch", "adamw_torch_fused"): assert code == 0, err   # torch's AdamW: what runs
        elif kind == "refused" and not (v is not None and v.lower() in ("false", "none")):
            assert code == 2 and one_line(err).startswith(f"rl_notes: error: {opt} (TRL's {f.name}): "), (f.name, err)
        elif kind == "ignored":
            assert code == 0 and "rl_notes: ignored, no meaning here: " in out and f"{opt} " in out, (f.name, out, err)
        elif code != 0:                                                      # a mapped option whose value rl_notes' config refuses
            assert one_line(err).startswith("rl_notes: error: "), (f.name, err)


def test_trl_preset_is_grpoconfigs_defaults():
    c = grpo_config()
    t = trl_config("trl", model="m")
    a = t.algo
    assert a.beta == c.beta == 0.0                                          # no KL term: use_bias_correction_kl has nothing to act on
    assert c.use_bias_correction_kl is True
    assert (a.eps_low, a.eps_high) == (c.epsilon, c.epsilon_high if c.epsilon_high is not None else c.epsilon)
    assert a.agg == TRL_NAMES["loss_type"].values[c.loss_type] == "token-mean"
    assert a.adv == TRL_NAMES["scale_rewards"].values[c.scale_rewards] == "group"
    assert c.importance_sampling_level == "token" and a.loss == "clip"
    assert (c.delta, a.dual_clip, c.top_entropy_quantile, a.top_entropy_quantile) == (None, None, 1.0, 1.0)
    assert (c.mask_truncated_completions, a.overlong_filter) == (False, False)
    assert (t.lr, t.max_new_tokens, t.lr_scheduler_type) == (c.learning_rate, c.max_completion_length, c.lr_scheduler_type.value)
    assert (t.group_size, t.temperature, t.ppo_epochs, t.max_grad_norm, t.weight_decay, t.warmup_steps) == \
           (c.num_generations, c.temperature, c.num_iterations, c.max_grad_norm, c.weight_decay, c.warmup_steps)
    assert TRL_TRAIN == {"lr": c.learning_rate, "max_new_tokens": c.max_completion_length, "lr_scheduler_type": "linear"}


def test_trl_preset_on_the_command_line(cli_cfg):
    code, cfg, out, err = cli_cfg("--algo", "trl")
    assert code == 0, err
    assert (cfg.algo.name, cfg.algo.beta, cfg.algo.agg, cfg.lr, cfg.max_new_tokens, cfg.lr_scheduler_type) == \
           ("trl", 0.0, "token-mean", 1e-6, 512, "linear")
    code, cfg, out, err = cli_cfg("--algo", "trl", "--learning_rate", "3e-6", "--lr-scheduler-type", "cosine", "--warmup-ratio", "0.1")
    assert code == 0 and (cfg.lr, cfg.lr_scheduler_type, cfg.warmup_ratio) == (3e-6, "cosine", 0.1), err


@pytest.mark.parametrize("kind", ["linear", "cosine"])
@pytest.mark.parametrize("warmup", [0, 3])
def test_lr_schedule_follows_transformers(kind, warmup):
    "After the warm-up, the rate at RL step s is transformers' at optimizer step s - 1 (the warm-up reaches lr one step earlier)."
    from transformers import get_scheduler
    from rl_notes.trainer import lr_factor
    T = 12
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sch = get_scheduler(kind, opt, num_warmup_steps=warmup, num_training_steps=T)
    hf = []
    for _ in range(T): hf.append(opt.param_groups[0]["lr"]); opt.step(); sch.step()
    cfg = TrainConfig(steps=T, warmup_steps=warmup, lr_scheduler_type=kind)
    ours = [lr_factor(cfg, s) for s in range(1, T + 1)]
    for s in range(warmup + 1, T + 1): assert math.isclose(ours[s - 1], hf[s - 1], rel_tol=1e-12, abs_tol=1e-15), (s, ours, hf)
    for s in range(1, warmup + 1): assert math.isclose(ours[s - 1], s / warmup) and math.isclose(hf[s - 1], (s - 1) / warmup)


def test_default_schedule_is_unchanged():
    from rl_notes.trainer import lr_factor
    assert [lr_factor(TrainConfig(steps=6, warmup_steps=4), s) for s in range(1, 7)] == [min(1.0, s / 4) for s in range(1, 7)]
    assert {lr_factor(TrainConfig(steps=6), s) for s in range(1, 7)} == {1.0}


@pytest.mark.parametrize("kw", [dict(), dict(per_device_train_batch_size=4, gradient_accumulation_steps=2),
                                dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4),
                                dict(per_device_train_batch_size=2, gradient_accumulation_steps=2, generation_batch_size=16, num_generations=4),
                                dict(per_device_train_batch_size=8, num_generations=4, steps_per_generation=3, num_iterations=2)])
def test_batch_arithmetic_matches_grpoconfig(kw):
    c = grpo_config(**kw)
    b = trl_batch(c.num_generations, c.per_device_train_batch_size, c.gradient_accumulation_steps,
                  kw.get("steps_per_generation"), kw.get("generation_batch_size"), num_processes=c.world_size, num_iterations=c.num_iterations)
    assert b["completions"] == c.generation_batch_size
    assert b["n_prompts"] * c.num_generations == c.generation_batch_size
    assert b["n_minibatches"] * c.gradient_accumulation_steps == c.steps_per_generation
    assert b["updates"] == c.steps_per_generation // c.gradient_accumulation_steps * c.num_iterations


def test_batch_options_on_the_command_line(cli_cfg):
    code, cfg, out, err = cli_cfg("--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", "--steps_per_generation", "4",
                                  "--num-generations", "8")
    assert code == 0, err
    assert (cfg.n_prompts, cfg.n_minibatches, cfg.micro_batch_size, cfg.group_size) == (2, 2, 4, 8)
    assert ("rl_notes: each step samples 16 completions (2 prompts x 8) on 1 process(es); an optimizer update takes 8 per process "
            "in micro-batches of 4; 2 update(s) per generation (2 minibatch(es) x 1 pass(es))") in out
    code, _, _, err = cli_cfg("--gradient-accumulation-steps", "2", "--n-prompts", "4")
    assert code == 2 and "--n-prompts sets the prompts per step" in one_line(err)
    code, _, _, err = cli_cfg("--generation-batch-size", "12")
    assert code == 2 and "must be a multiple of per_device_train_batch_size x processes (8 x 1)" in one_line(err)
    code, cfg, out, err = cli_cfg("--n-prompts", "4", "--per-device-train-batch-size", "3", "--num-generations", "4")   # the direct form
    assert code == 0 and (cfg.n_prompts, cfg.micro_batch_size) == (4, 3), err
    assert "16 completions (4 prompts x 4)" in out and "micro-batches of 3" in out


def test_scale_rewards_batch_is_trls():
    assert get_algo("grpo", scale_rewards="batch").adv == "group-batch"
    from rl_notes.losses import ADVANTAGE_ESTIMATORS, Batch
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    b = Batch.__new__(Batch); b.score, b.group_size = r, 4
    adv, _ = ADVANTAGE_ESTIMATORS["group-batch"](None, b)
    want = (r - r.view(2, 4).mean(-1).repeat_interleave(4)) / (r.std() + 1e-4)   # TRL: nanstd of the raw rewards, + 1e-4
    torch.testing.assert_close(adv, want)
    rpp, _ = ADVANTAGE_ESTIMATORS["reinforce_pp"](None, b)                          # REINFORCE++ keeps its own form
    assert not torch.allclose(rpp, want)


@pytest.mark.slow
def test_real_run_logs_trls_names_and_the_batch_line(micro_sft, tmp_path, capsys):
    "A short run from the micro SFT start: TRL's metric names beside rl_notes' (equal values), the batch line, a model card without base_model."
    import json
    from rl_notes.doctor import to_series, SOURCE_MAPS
    code = main(["train", "--model", micro_sft, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false", "--num_generations", "4",
                 "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1", "--steps_per_generation", "2",
                 "--max-completion-length", "3", "--max_steps", "2", "--n-eval", "4", "--n-train", "200", "--quiet", "--threads", "1",
                 "--beta", "0.1", "--logging_steps", "5", "--output_dir", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "rl_notes: ignored, no meaning here: --logging-steps" in out
    assert "each step samples 8 completions (2 prompts x 4) on 1 process(es); an optimizer update takes 4 per process in micro-batches of 4; " \
           "2 update(s) per generation (2 minibatch(es) x 1 pass(es))" in out
    rows = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last["completions/mean_length"] == pytest.approx(last["resp_len"]) and last["completions/clipped_ratio"] == pytest.approx(last["trunc_rate"])
    assert (last["clip_ratio/low_mean"], last["clip_ratio/high_mean"], last["clip_ratio/region_mean"], last["kl"]) == \
           pytest.approx((last["clipfrac_low"], last["clipfrac_high"], last["clipfrac"], last["kl_ref"]))
    _, unmapped = to_series(rows, "rl_notes")
    from rl_notes.doctor import KNOWN_UNUSED
    assert not [k for k in unmapped if not KNOWN_UNUSED["rl_notes"].match(k)], unmapped   # the doctor knows the new names
    card = (tmp_path / "run" / "model" / "README.md").read_text()
    assert "base_model" not in card.split("---")[1]                      # a local start is no hub id


def test_reward_format_hint():
    from rl_notes.data import RewardSet
    def chat_style(prompts, completions, **kw): return [float("3" in c[0]["content"]) for c in completions]
    rows = [{"prompt": "1+2="}, {"prompt": "4+4="}]
    with pytest.raises(ValueError, match=r"the prompts are strings, so each completion is a str"):
        RewardSet([chat_style]).score(rows, ["3"] * 4, group_size=2)


@pytest.mark.slow
def test_resume_a_checkpoint_written_before_the_schedule_fields(micro_sft, tmp_path):
    "A checkpoint whose config lacks lr_scheduler_type / warmup_ratio (written before they existed) resumes at their defaults, not at others."
    import json
    from rl_notes.trainer import train
    from rl_notes.checkpoint import CheckpointError
    kw = dict(model=micro_sft, task_kw=dict(max_digits=2, scratchpad=False), steps=2, n_prompts=2, group_size=4, max_new_tokens=3,
              n_eval=0, n_train=200, save_every=1, progress=False, threads=1, out_dir=str(tmp_path / "run"))
    train(TrainConfig(**kw, stop_at=1))
    f = tmp_path / "run" / "ckpt" / "state.json"
    st = json.loads(f.read_text())
    for k in ("lr_scheduler_type", "warmup_ratio"): del st["config"][k]
    f.write_text(json.dumps(st))
    with pytest.raises(CheckpointError, match="lr_scheduler_type: checkpoint None != now 'linear'"):
        train(TrainConfig(**kw, resume=True, lr_scheduler_type="linear"))
    rows = train(TrainConfig(**kw, resume=True))
    assert [r["step"] for r in rows if "step" in r][-1] == 2


def trl_compute_loss(loss_type, logp, old, adv, mask, algo, level="token", delta=None):
    "TRL 1.16's own GRPOTrainer._compute_loss on the given tensors: a stub trainer (one process, beta 0) whose log-prob pass returns `logp`."
    import collections, types
    a = types.SimpleNamespace(delta=delta, use_bias_correction_kl=True, steps_per_generation=1, sapo_temperature_pos=algo.sapo_temperature_pos,
                              sapo_temperature_neg=algo.sapo_temperature_neg, vespo_k_pos=algo.vespo_k_pos, vespo_lambda_pos=algo.vespo_lambda_pos,
                              vespo_k_neg=algo.vespo_k_neg, vespo_lambda_neg=algo.vespo_lambda_neg)
    acc = types.SimpleNamespace(num_processes=1, reduce=lambda t, reduction="sum": t, gather=lambda t: t, gather_for_metrics=lambda t: t, sync_gradients=True)
    s = types.SimpleNamespace(args=a, accelerator=acc, aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
                              importance_sampling_level=level, beta=0.0, loss_type=loss_type, epsilon_low=algo.eps_low, epsilon_high=algo.eps_high,
                              use_vllm=False, vllm_importance_sampling_correction=False, model=types.SimpleNamespace(training=True),
                              current_gradient_accumulation_steps=1, _metrics=collections.defaultdict(lambda: collections.defaultdict(list)),
                              _entropy_bonus_enabled=False, max_completion_length=logp.shape[1], get_gamma_weights=trl.GRPOTrainer.get_gamma_weights)
    s._get_per_token_logps_and_entropies = lambda *x, **k: (logp, torch.zeros_like(logp), None)
    B, T = logp.shape
    inputs = dict(prompt_ids=torch.zeros(B, 1, dtype=torch.long), prompt_mask=torch.ones(B, 1, dtype=torch.long),
                  completion_ids=torch.zeros(B, T, dtype=torch.long), completion_mask=mask.long(), advantages=adv, old_per_token_logps=old,
                  num_items_in_batch=mask.sum().float())
    return trl.GRPOTrainer._compute_loss(s, None, inputs)


@pytest.mark.parametrize("loss_type, level, kw", [
    ("dapo", "token", dict()), ("grpo", "token", dict()), ("dr_grpo", "token", dict()), ("dapo", "token", dict(delta=1.5)),
    ("grpo", "sequence", dict()), ("dapo", "sequence", dict()), ("luspo", "sequence", dict()), ("luspo", "token", dict()),
    ("sapo", "token", dict()), ("sapo", "token", dict(sapo_temperature_pos=2.0, sapo_temperature_neg=0.5)),
    ("vespo", "token", dict()), ("vespo", "token", dict(vespo_k_pos=1.0, vespo_lambda_pos=1.5, vespo_k_neg=0.5, vespo_lambda_neg=4.0))])
def test_losses_equal_trls_code_path(loss_type, level, kw):
    "rl_notes' loss for TRL's loss_type / importance_sampling_level / delta / sapo and vespo settings, against TRL's _compute_loss: value and gradient."
    from rl_notes.losses import POLICY_LOSSES
    algo = get_algo("trl", loss_type=loss_type, importance_sampling_level=level, **kw)
    g = torch.Generator().manual_seed(7)
    B, T = 8, 6
    old = torch.randn(B, T, generator=g) * 0.5 - 1.5
    logp = (old + torch.randn(B, T, generator=g) * (0.05 if level == "sequence" else 0.4)).requires_grad_()   # ratios in and out of the clip
    adv = torch.randn(B, generator=g)
    mask = torch.rand(B, T, generator=g) > 0.25; mask[:, 0] = True
    ours, _ = POLICY_LOSSES[algo.loss](algo, logp, old, None, adv, mask, max_tokens=T, global_tokens=None)
    (g1,) = torch.autograd.grad(ours, logp)
    lp = logp.detach().clone().requires_grad_()
    theirs = trl_compute_loss(loss_type, lp, old, adv, mask, algo, level, kw.get("delta"))
    (g2,) = torch.autograd.grad(theirs, lp)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-6)


def test_trl_loss_types_on_the_command_line(cli_cfg):
    code, cfg, _, err = cli_cfg("--loss-type", "sapo", "--sapo-temperature-neg", "2")
    assert code == 0 and (cfg.algo.loss, cfg.algo.agg, cfg.algo.sapo_temperature_neg) == ("sapo", "seq-mean-token-mean", 2.0), err
    code, cfg, _, err = cli_cfg("--loss_type", "luspo", "--importance_sampling_level", "sequence")
    assert code == 0 and (cfg.algo.loss, cfg.algo.agg) == ("gspo", "seq-mean-token-sum"), err
    code, cfg, _, err = cli_cfg("--loss-type", "vespo")
    assert code == 0 and (cfg.algo.loss, cfg.algo.agg) == ("vespo", "token-mean"), err
    code, _, _, err = cli_cfg("--loss-type", "vespo", "--importance-sampling-level", "sequence")
    assert code == 2 and "takes token ratios" in one_line(err)


def test_a_grpoconfig_as_yaml_runs_with_trls_batch(micro_sft, tmp_path, capsys):
    "A GRPOConfig written as YAML with TRL's field names (`--config`) runs unchanged: its batch is GRPOConfig's, its values are in config.json."
    import json, yaml
    from trl import GRPOConfig
    fields = dict(num_generations=4, per_device_train_batch_size=4, gradient_accumulation_steps=1, steps_per_generation=2,
                  max_completion_length=3, max_steps=2, learning_rate=1e-3, beta=0.0, loss_type="dapo", epsilon=0.2,
                  scale_rewards="group", logging_steps=5, bf16=False, seed=3, output_dir=str(tmp_path / "run"))
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump(fields))
    code = main(["train", "--model", micro_sft, "--algo", "trl", "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false",
                 "--config", str(tmp_path / "grpo.yaml"), "--n-eval", "4", "--n-train", "200", "--quiet", "--threads", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    g = GRPOConfig(**{k: v for k, v in fields.items() if k != "output_dir"}, output_dir=str(tmp_path / "trl"), use_cpu=True)
    prompts = g.generation_batch_size // g.num_generations                  # GRPOConfig's own arithmetic: prompts per generation
    assert f"each step samples {g.generation_batch_size} completions ({prompts} prompts x 4)" in out
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (cfg["group_size"], cfg["max_new_tokens"], cfg["lr"], cfg["seed"], cfg["algo"]["beta"], cfg["algo"]["agg"]) == (4, 3, 1e-3, 3, 0.0, "token-mean")
    assert [json.loads(l)["step"] for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_cosine_with_min_lr_follows_transformers(rate):
    from transformers import get_scheduler
    from rl_notes.trainer import lr_factor
    T, warmup = 12, 2
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sch = get_scheduler("cosine_with_min_lr", opt, num_warmup_steps=warmup, num_training_steps=T, scheduler_specific_kwargs={"min_lr_rate": rate})
    hf = []
    for _ in range(T): hf.append(opt.param_groups[0]["lr"]); opt.step(); sch.step()
    cfg = TrainConfig(steps=T, warmup_steps=warmup, lr_scheduler_type="cosine_with_min_lr", min_lr_rate=rate)
    for s in range(warmup + 1, T + 1): assert math.isclose(lr_factor(cfg, s), hf[s - 1], rel_tol=1e-12, abs_tol=1e-15), (s, rate)


def test_lr_scheduler_kwargs_on_the_command_line(cli_cfg):
    code, cfg, _, err = cli_cfg("--lr-scheduler-type", "cosine_with_min_lr", "--lr-scheduler-kwargs", '{"min_lr_rate": 0.1}')
    assert code == 0 and (cfg.lr_scheduler_type, cfg.min_lr_rate) == ("cosine_with_min_lr", 0.1), err
    code, cfg, _, err = cli_cfg("--learning-rate", "1e-5", "--lr-scheduler-type", "cosine_with_min_lr", "--lr-scheduler-kwargs", '{"min_lr": 1e-6}')
    assert code == 0 and math.isclose(cfg.min_lr_rate, 0.1), err
    code, _, _, err = cli_cfg("--lr-scheduler-kwargs", '{"num_cycles": 2}')
    assert code == 2 and "reads only" in one_line(err)


def test_save_total_limit_is_trl_s(cli_cfg):
    "--save-total-limit N: each save also writes checkpoint-N/ (TRL's folders), the latest N kept; left out, none are written."
    code, cfg, _, err = cli_cfg("--save-steps", 5, "--save-total-limit", 2)
    assert code == 0 and (cfg.save_every, cfg.save_total_limit) == (5, 2), err
    code, cfg, _, err = cli_cfg("--save-steps", 5)
    assert code == 0 and cfg.save_total_limit is None, err
    code, _, _, err = cli_cfg("--save-total-limit", 0)
    assert code == 2 and "save_total_limit" in one_line(err)
