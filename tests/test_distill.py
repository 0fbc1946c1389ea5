"""On-policy distillation (nbs/18_distill.ipynb): the full-vocabulary reverse KL against TRL's own losses on the same tensors,
the sampled -k1 advantage's expected gradient against the gradient of TRL's GKD loss, and the trainer with a teacher: the
reverse KL to the teacher falls, `distill_coef=0` trains exactly as no teacher, a teacher with another vocabulary is refused,
resume is exact, and the command line offers the options.

TRL 1.16.0 as installed: `GKDTrainer.generalized_jsd_loss` (trl/experimental/gkd/gkd_trainer.py, line 238: beta == 1 is
`F.kl_div(teacher_log_probs, student_log_probs, log_target=True)` at line 280, the positions with label -100 dropped at line 302,
"batchmean" the sum over the kept positions divided by their number at line 311) and the stable `DistillationTrainer`'s
`_chunked_divergence_loss` (trl/trainer/distillation_trainer.py, line 101: the same divergence from hidden states and LM heads,
summed over the valid positions and divided by their number)."""
import json, os, subprocess, sys, warnings
from pathlib import Path
import pytest, torch
from hypothesis import given, settings, strategies as st
from rl_notes.core import masked_mean
from rl_notes.distill import distill_advantages, token_reverse_kl
from rl_notes.models import build_tokenizer, load_tokenizer, tiny_llama
from rl_notes.trainconfig import TrainConfig, get_algo
from rl_notes.trainer import train

with warnings.catch_warnings():
    warnings.simplefilter("ignore")                       # trl.experimental warns that it is experimental
    from trl.experimental.gkd import GKDTrainer
    from trl.trainer.distillation_trainer import _chunked_divergence_loss


def _tensors(seed:int, B:int, T:int, V:int):
    "Student and teacher logits (B, T, V) and a mask with at least one position set."
    g = torch.Generator().manual_seed(seed)
    s = 2.0 * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    t = s + torch.randn(B, T, V, generator=g, dtype=torch.float64)
    m = torch.rand(B, T, generator=g) < 0.7
    m[0, 0] = True
    return s, t, m


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), B=st.integers(1, 3), T=st.integers(1, 5), V=st.integers(2, 40), temperature=st.sampled_from([0.5, 1.0, 1.3]))
def test_token_reverse_kl_is_trl_gkd_at_beta_1(seed, B, T, V, temperature):
    "TRL's GKD loss at beta=1 with labels -100 outside the mask ('batchmean') is the token mean of `token_reverse_kl`, value and gradient; beta=0 is its mirror."
    s, t, m = _tensors(seed, B, T, V)
    labels = torch.where(m, torch.zeros(B, T, dtype=torch.long), torch.full((B, T), -100))
    s1, s2 = s.clone().requires_grad_(True), s.clone().requires_grad_(True)
    trl = GKDTrainer.generalized_jsd_loss(s1, t, labels=labels, beta=1.0, temperature=temperature, reduction="batchmean")
    ours = masked_mean(token_reverse_kl(s2, t, m, temperature=temperature), m)
    torch.testing.assert_close(ours.double(), trl, rtol=1e-5, atol=1e-6)
    trl.backward(); ours.backward()
    torch.testing.assert_close(s2.grad, s1.grad, rtol=1e-4, atol=1e-6)
    fwd = GKDTrainer.generalized_jsd_loss(s, t, labels=labels, beta=0.0, temperature=temperature, reduction="batchmean")   # KL(teacher || student)
    torch.testing.assert_close(masked_mean(token_reverse_kl(t, s, m, temperature=temperature), m).double(), fwd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_reverse_kl_is_trl_distillation_trainer_term(temperature):
    "TRL's DistillationTrainer computes the divergence from hidden states and the two LM heads in tiles: the token mean of `token_reverse_kl` on their logits."
    g = torch.Generator().manual_seed(0)
    B, T, H, V = 3, 4, 8, 17
    hs, ht = torch.randn(B, T, H, generator=g), torch.randn(B, T, H, generator=g)
    ws, wt = torch.randn(V, H, generator=g), torch.randn(V, H, generator=g)
    m = torch.rand(B, T, generator=g) < 0.6
    loss, _, n = _chunked_divergence_loss(hs, ht, ws, wt, m.long(), beta=1.0, temperature=temperature)
    ours = masked_mean(token_reverse_kl(hs @ ws.T, ht @ wt.T, m, temperature=temperature), m)
    assert int(n) == int(m.sum())
    torch.testing.assert_close(ours, loss, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_k1_advantage_is_gkd_gradient_in_expectation(seed):
    "Each position's expected policy gradient with the advantage -k1 (the token drawn from the student, every value enumerated) is the gradient of TRL's beta=1 loss."
    s, t, m = _tensors(seed, 2, 3, 6)
    B, T, V = s.shape
    labels = torch.where(m, torch.zeros(B, T, dtype=torch.long), torch.full((B, T), -100))
    s1 = s.clone().requires_grad_(True)
    GKDTrainer.generalized_jsd_loss(s1, t, labels=labels, beta=1.0, reduction="batchmean").backward()
    s2 = s.clone().requires_grad_(True)
    lp, tl = s2.log_softmax(-1), t.log_softmax(-1)                                   # (B, T, V): every token a possible draw
    mv = m[..., None].expand(B, T, V)
    adv = distill_advantages(lp.reshape(B, T * V), tl.reshape(B, T * V), mv.reshape(B, T * V)).view(B, T, V)
    # E_{y ~ pi}[-A(y) grad log pi(y)] per position, averaged over the kept positions as TRL's "batchmean"
    (-(lp.exp().detach() * adv * lp).sum() / m.sum()).backward()
    torch.testing.assert_close(s2.grad, s1.grad, rtol=1e-6, atol=1e-9)


# ---- the trainer with a teacher

@pytest.fixture
def models(micro_sft, tmp_path):
    "The micro SFT model of conftest.py (the teacher), a random model with its tokenizer (the student), one with another vocabulary."
    tok = load_tokenizer(micro_sft)
    tiny_llama(tok, hidden_size=32, num_layers=1, heads=2, seed=1).save_pretrained(tmp_path / "student"); tok.save_pretrained(tmp_path / "student")
    other = build_tokenizer(chars="0123456789+=")
    tiny_llama(other, hidden_size=32, num_layers=1, heads=2).save_pretrained(tmp_path / "other"); other.save_pretrained(tmp_path / "other")
    return dict(teacher=micro_sft, student=str(tmp_path / "student"), other=str(tmp_path / "other"))

PURE = get_algo("grpo", adv="none", beta=0.0, agg="token-mean")

def small(student:str, **kw) -> dict:
    return dict(dict(model=student, task_kw=dict(max_digits=2, scratchpad=False), steps=25, n_prompts=8, group_size=4, max_new_tokens=4,
                     lr=1e-2, n_train=500, n_eval=0, eval_every=0, progress=False, threads=1), **kw)

def strip(rows): return [{k: v for k, v in r.items() if not k.startswith("time")} for r in rows]


def test_pure_distillation_moves_the_student_to_the_teacher(models, tmp_path):
    "25 steps of pure distillation (advantage -k1 per token, no reward): the logged reverse KL to the teacher falls."
    rows = train(TrainConfig(teacher=models["teacher"], algo=PURE, out_dir=str(tmp_path / "run"), **small(models["student"])))
    kl = [r["distill/reverse_kl"] for r in rows[1:]]
    assert all(k in rows[-1] for k in ("distill/reverse_kl", "distill/reverse_kl_k3", "distill/reverse_kl_seq"))
    assert rows[-1]["distill/reverse_kl_k3"] >= 0
    first, last = sum(kl[:5]) / 5, sum(kl[-5:]) / 5
    assert last < 0.5 * first, (first, last)
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (cfg["teacher"], cfg["distill_coef"], cfg["algo"]["adv"]) == (models["teacher"], 1.0, "none")
    from rl_notes.runlogs import read_log, to_series, KNOWN_UNUSED        # the doctor knows the teacher's metrics: none is "unknown"
    source, raw, _ = read_log(tmp_path / "run")
    assert all(KNOWN_UNUSED[source].match(k) for k in to_series(raw, source)[1] if k.startswith("distill/"))


def test_distill_coef_0_trains_as_without_a_teacher(models, tmp_path):
    "With distill_coef=0 the teacher is only measured: the rows (its metrics aside) and the weights are those of the run without it."
    from safetensors.torch import load_file
    algo = get_algo("grpo", beta=0.0)
    base = train(TrainConfig(algo=algo, out_dir=str(tmp_path / "base"), **small(models["teacher"], steps=3, lr=1e-3)))
    zero = train(TrainConfig(algo=algo, teacher=models["student"], distill_coef=0.0, out_dir=str(tmp_path / "zero"), **small(models["teacher"], steps=3, lr=1e-3)))
    assert strip(base) == [{k: v for k, v in r.items() if not k.startswith("distill/")} for r in strip(zero)]
    assert all("distill/reverse_kl" in r for r in zero[1:]) and not any("distill/reverse_kl" in r for r in base)
    wb, wz = load_file(str(tmp_path / "base" / "ckpt" / "policy.safetensors")), load_file(str(tmp_path / "zero" / "ckpt" / "policy.safetensors"))
    assert all(torch.equal(wb[k], wz[k]) for k in wb)
    one = train(TrainConfig(algo=algo, teacher=models["student"], out_dir=str(tmp_path / "one"), **small(models["teacher"], steps=3, lr=1e-3)))
    assert strip(one)[-1]["loss"] != strip(base)[-1]["loss"]                   # with its weight the teacher's term changes the update


def test_a_teacher_with_another_vocabulary_is_refused(models, tmp_path):
    with pytest.raises(ValueError, match="TrainConfig.teacher .* does not share the student's tokenizer"):
        train(TrainConfig(teacher=models["other"], algo=PURE, out_dir=str(tmp_path / "run"), **small(models["student"], steps=1)))
    with pytest.raises(ValueError, match="TrainConfig.teacher .* is not a directory"):
        train(TrainConfig(teacher=str(tmp_path / "nowhere"), algo=PURE, out_dir=str(tmp_path / "run2"), **small(models["student"], steps=1)))
    with pytest.raises(ValueError, match="Algo.adv='none' gives every response advantage 0"):
        TrainConfig(algo=PURE, **small(models["student"]))


def test_resume_with_a_teacher_is_exact(models, tmp_path):
    kw = small(models["student"], steps=5, save_every=2, teacher=models["teacher"], algo=get_algo("grpo", beta=0.0, agg="token-mean"), distill_coef=0.5)
    full = train(TrainConfig(out_dir=str(tmp_path / "full"), **kw))
    cut = train(TrainConfig(out_dir=str(tmp_path / "cut"), stop_at=3, **kw))     # killed after step 3, checkpoint at 2
    assert cut[-1]["step"] == 3
    resumed = train(TrainConfig(out_dir=str(tmp_path / "cut"), resume=True, **kw))
    assert strip(resumed) == strip(full) and all("distill/reverse_kl" in r for r in full[1:])
    st = json.loads((tmp_path / "cut" / "ckpt" / "state.json").read_text())
    assert "teacher" in st["extra"]["content"]                                  # the teacher's files, by content


def test_a_changed_teacher_is_refused_on_resume(models, tmp_path):
    from rl_notes.checkpoint import CheckpointError
    kw = small(models["student"], steps=2, teacher=models["teacher"], algo=PURE)
    train(TrainConfig(out_dir=str(tmp_path / "run"), stop_at=1, save_every=1, **kw))
    with pytest.raises(CheckpointError, match="teacher changed since that checkpoint"):
        train(TrainConfig(out_dir=str(tmp_path / "run"), resume=True, save_every=1, **{**kw, "teacher": models["student"]}))


def test_cli_options():
    "`rl_notes train --help` offers --teacher (TRL's --teacher-model-name-or-path) and --distill-coef, generated from the fields."
    code = "import sys; from rl_notes.cli import main\ntry: main(['train', '--help'])\nexcept SystemExit: pass\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    text = " ".join(r.stdout.split())
    assert "--teacher TEACHER, --teacher-model-name-or-path TEACHER on-policy distillation" in text, text
    assert "--distill-coef DISTILL_COEF weight of the teacher's per-token advantage" in text and "(default 1.0)" in text


def test_cli_refuses_pure_distillation_without_a_teacher(tmp_path):
    "`--set adv=none` without `--teacher`: one line naming the fix, exit status 2, before any model loads."
    code = "import sys; from rl_notes.cli import main; sys.exit(main(sys.argv[1:]))"
    r = subprocess.run([sys.executable, "-c", code, "train", "--model", str(tmp_path), "--set", "adv=none", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Algo.adv='none' gives every response advantage 0" in lines[0] and "--teacher" in lines[0], r.stderr
