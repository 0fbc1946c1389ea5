"""A TRL user's first run, offline: a hub model and a hub dataset from a Hugging Face cache in the hub's layout, two
reward functions with TRL's signature in a file, TRL's option names, then `rl_notes eval` of the run and
`from_pretrained` of the model it wrote; and the micro-batch equivalence (with LoRA and gradient checkpointing)."""
import json, os, subprocess, sys
from pathlib import Path
import pytest

BIN = Path(sys.executable).parent / "rl_notes"
CMD = [str(BIN)] if BIN.exists() else [sys.executable, "-c", "import sys; from rl_notes.cli import main; sys.exit(main())"]

REWARDS = '''
def mentions_answer(prompts, completions, answer, **kwargs):
    return [float(a in c[0]["content"]) for c, a in zip(completions, answer)]

def brevity(prompts, completions, **kwargs):
    return [1.0 / (1 + len(c[0]["content"])) for c in completions]
'''


def _hub_cache(root:Path) -> Path:
    "A Hugging Face cache with the model org/tiny-chat and the dataset org/sums (train and test splits), as the hub client lays it out."
    from rl_notes.models import save_tiny_chat_model
    hub = root / "hub"
    snap = hub / "models--org--tiny-chat" / "snapshots" / "0123abcd"
    save_tiny_chat_model(snap, seed=0)
    data = hub / "datasets--org--sums" / "snapshots" / "4567ef01"
    data.mkdir(parents=True)
    row = lambda a, b: json.dumps({"prompt": [{"role": "user", "content": f"What is {a}+{b}?"}], "answer": str(a + b)}) + "\n"
    (data / "train.jsonl").write_text("".join(row(a, b) for a in range(6) for b in range(5)))
    (data / "test.jsonl").write_text("".join(row(a, 5) for a in range(6)))
    for repo, rev in ((snap, "0123abcd"), (data, "4567ef01")):
        (repo.parents[1] / "refs").mkdir(); (repo.parents[1] / "refs" / "main").write_text(rev)
    return hub


def _run(env, *args, timeout=600):
    return subprocess.run(CMD + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)


def _one_line_error(r, msg):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and msg in lines[0], r.stderr


@pytest.mark.slow
def test_train_eval_from_pretrained_offline(tmp_path):
    hub = _hub_cache(tmp_path)
    (tmp_path / "rewards.py").write_text(REWARDS)
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "datasets"), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    f, out = tmp_path / "rewards.py", tmp_path / "run"
    reward = ["--reward", f"{f}:mentions_answer", "--reward", f"{f}:brevity=0.5"]
    r = _run(env, "train", "--model", "org/tiny-chat", "--dataset", "org/sums", *reward, "--output-dir", out, "--quiet",
             # TRL GRPOConfig's names
             "--num-generations", "4", "--max-completion-length", "8", "--learning-rate", "1e-3", "--beta", "0.0", "--epsilon", "0.2",
             "--epsilon-high", "0.28", "--loss-type", "dapo", "--scale-rewards", "group", "--per-device-train-batch-size", "3",
             "--max-steps", "2", "--n-prompts", "4", "--n-eval", "4", "--eval-steps", "2", "--threads", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"model (Hugging Face format): {out / 'model'}" in r.stdout and "held-out mean reward" in r.stdout
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["model"], cfg["dataset"], cfg["group_size"], cfg["max_new_tokens"], cfg["lr"], cfg["micro_batch_size"], cfg["steps"]) == \
           ("org/tiny-chat", "org/sums", 4, 8, 1e-3, 3, 2)
    assert (cfg["algo"]["beta"], cfg["algo"]["eps_low"], cfg["algo"]["eps_high"], cfg["algo"]["agg"], cfg["algo"]["adv"]) == \
           (0.0, 0.2, 0.28, "token-mean", "group")
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows] == [0, 1, 2]
    last = rows[-1]
    for k in ("reward", "reward_std", "frac_reward_zero_std", "rewards/mentions_answer/mean", "rewards/mentions_answer/std",
              "rewards/brevity/mean", "rewards/brevity/std", "heldout_reward"):
        assert last.get(k) is not None, k
    assert "acc" not in last and "heldout_acc" not in last            # reward functions define no accuracy
    assert "## Final metrics" in (out / "model" / "README.md").read_text()

    # eval of the run: its model, dataset, rewards and response budget
    r = _run(env, "eval", out, "--n", "4", "--trust-run-code")   # the run names its reward file: eval imports it only when told
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["model"] == str(out / "model") and res["n"] == 4 and 0 <= res["reward"] <= 1.5 and "accuracy" not in res
    # eval of the model directory, with the data and rewards given
    r = _run(env, "eval", out / "model", "--dataset", "org/sums", *reward, "--max-new-tokens", "8", "--n", "3")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["n"] == 3

    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(out / "model")
    tok = AutoTokenizer.from_pretrained(out / "model")
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 1+2?"}], add_generation_prompt=True, return_tensors="pt")
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert model.generate(ids, max_new_tokens=3, do_sample=False).shape[1] > ids.shape[1]

    # offline and not in the cache: one line saying what to download; a dataset without a reward: one line saying what to pass
    _one_line_error(_run(env, "train", "--model", "org/missing", *reward, "--dataset", "org/sums", "--out", tmp_path / "x"),
                    "hf download org/missing")
    _one_line_error(_run(env, "train", "--model", "org/tiny-chat", "--dataset", "org/sums", "--out", tmp_path / "y"),
                    "needs --reward module:function")
    _one_line_error(_run(env, "train", "--model", "org/tiny-chat", "--dataset", "org/none", *reward, "--out", tmp_path / "z"),
                    "`dataset` 'org/none': HF_HUB_OFFLINE=1 and it is not in the Hugging Face cache")


@pytest.mark.parametrize("kw", [dict(), dict(lora_r=4, lora_alpha=8.0), dict(gradient_checkpointing=True)], ids=["full", "lora", "grad_ckpt"])
def test_micro_batches_give_the_same_step(tmp_path, micro_sft, kw):
    "One RL step with and without micro-batches: the same loss, gradient norm and weights, to float tolerance."
    if kw.get("lora_r"): pytest.importorskip("peft")
    import torch
    from safetensors.torch import load_file
    from rl_notes.trainconfig import TrainConfig, get_algo
    from rl_notes.trainer import train
    base = dict(model=micro_sft, algo=get_algo("grpo", beta=0.1), task_kw=dict(max_digits=2, scratchpad=False), steps=1, n_prompts=4,
                group_size=4, max_new_tokens=4, lr=1e-3, n_eval=0, n_train=64, progress=False, threads=1, **kw)
    # the levers off: the true gradient is ~0 here (no reward yet, the policy is the reference), and Adam turns the float noise of
    # another summation order (trimmed micro-batches, a prompt pass per micro-batch) into a full-size step; tests/test_trainer_trim.py
    # and tests/test_rollout_compact.py check the levers where the gradient is not 0
    levers_off = dict(trim_micro_batches=False, share_prompt=False, compact_generation=False)
    runs = {m: train(TrainConfig(out_dir=str(tmp_path / f"m{m}"), micro_batch_size=m, **levers_off, **base)) for m in (None, 3, 16)}
    for m in (3, 16):
        a, b = runs[None][-1], runs[m][-1]
        assert abs(a["loss"] - b["loss"]) < 1e-6 and abs(a["grad_norm"] - b["grad_norm"]) < 1e-5, (m, a["loss"], b["loss"], a["grad_norm"], b["grad_norm"])
        wa, wb = (load_file(str(tmp_path / f"m{x}" / "ckpt" / "policy.safetensors")) for x in (None, m))
        assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-6
    assert runs[3][-1]["micro_batches"] == 6                    # 16 responses in micro-batches of 3, 3, 3, 3, 3, 1


def test_loss_rough_edges():
    "dapo_loss with every response truncated warns (loss 0, no gradient); grpo_loss / dapo_loss agree by keyword; help(grpo_loss) documents the arguments."
    import warnings
    import torch
    from rl_notes.grpo import grpo_loss
    from rl_notes.dapo import dapo_loss
    g = torch.Generator().manual_seed(0)
    logp, mask = -torch.rand(4, 5, generator=g), torch.ones(4, 5)
    kw = dict(logp=logp, old_logp=logp + 0.1 * torch.randn(4, 5, generator=g), adv=torch.randn(4, generator=g), mask=mask)
    with pytest.warns(UserWarning, match="all 4 responses are truncated"):
        loss, m = dapo_loss(**kw, truncated=torch.ones(4, dtype=torch.bool))
    assert float(loss) == 0.0 and float(m["overlong_frac"]) == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                    # some responses truncated: no warning
        dapo_loss(**kw, truncated=torch.tensor([True, False, False, False]))
    assert torch.allclose(dapo_loss(**kw, eps_high=0.2)[0], grpo_loss(**kw, ref_logp=None, beta=0.0, agg="token-mean")[0])
    assert "Pass them by keyword" in grpo_loss.__doc__ and "by keyword" in dapo_loss.__doc__


def test_trl_names_and_unknown_fields():
    from rl_notes.trainconfig import get_algo, trl_config
    c = trl_config(model="m", num_generations=4, max_completion_length=64, learning_rate=1e-6, beta=0.0, epsilon=0.2, loss_type="dr_grpo",
                   scale_rewards="none", num_iterations=2, per_device_train_batch_size=8, temperature=0.7, top_p=1.0, top_k=0)
    assert (c.group_size, c.max_new_tokens, c.lr, c.ppo_epochs, c.micro_batch_size, c.temperature) == (4, 64, 1e-6, 2, 8, 0.7)
    assert (c.algo.beta, c.algo.eps_low, c.algo.eps_high, c.algo.agg, c.algo.adv) == (0.0, 0.2, 0.2, "seq-mean-token-sum-norm", "group-mean-only")
    with pytest.raises(ValueError, match=r"unknown Algo field\(s\) \['epsilonn'\]; valid: name, adv.*also TRL's names: beta, epsilon"):
        get_algo("grpo", epsilonn=0.2)
    assert (trl_config(model="m", top_p=0.9).top_p, trl_config(model="m", top_k=5).top_k) == (0.9, 5)   # truncated sampling, renormalised
    assert trl_config(model="m", multi_objective_aggregation="normalize_then_sum").algo.adv == "gdpo"        # GDPO, TRL's semantics (tests/test_family_gdpo.py)
    assert trl_config(model="m", multi_objective_aggregation="sum_then_normalize").algo.adv == "group"


def test_wandb_reporter_offline(tmp_path, micro_sft, monkeypatch):
    "report_to='wandb' under W&B's offline mode: a run in out_dir/wandb, the rows under train/ and eval/ against `step`."
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline"); monkeypatch.setenv("WANDB_SILENT", "true")
    from rl_notes.trainconfig import TrainConfig
    from rl_notes.trainer import train
    rows = train(TrainConfig(model=micro_sft, task_kw=dict(max_digits=2, scratchpad=False), steps=2, n_prompts=2, group_size=2,
                             max_new_tokens=4, n_eval=4, eval_every=1, n_train=64, progress=False, threads=1, report_to="wandb",
                             out_dir=str(tmp_path / "run")))
    assert len(rows) == 3
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0
