"""The trainer on what users bring: a Hugging Face chat model directory (a tiny random Qwen2 with a BPE tokenizer and a
chat template, saved by the test), a dataset file, reward functions with TRL's signature, LoRA, bfloat16, gradient
checkpointing and TensorBoard / trackio reporting; and each kind of bad input as one line and exit status 2."""
import json, math, os, subprocess, sys, textwrap
from pathlib import Path

import pytest
import torch

from rl_notes.cli import main
from rl_notes.models import save_tiny_chat_model
from rl_notes.trainconfig import TrainConfig
from rl_notes.trainer import train

QUESTIONS = [("What is 2+3?", "5"), ("What is 7-4?", "3"), ("Name a colour.", "red"), ("What is 6*2?", "12"),
             ("Say hello.", "hello"), ("What is 9+1?", "10"), ("Spell cat.", "cat"), ("What is 5*5?", "25")]

REWARDS = '''
def says_answer(prompts, completions, answer, **kwargs):
    "1 when the completion contains the answer (a TRL-style function reading the `answer` column)."
    return [float(a in c[0]["content"]) for c, a in zip(completions, answer)]

def short(prompts, completions, **kwargs):
    "Prefer short completions; None (no opinion) for empty ones."
    return [None if not c[0]["content"] else 1.0 / (1 + len(c[0]["content"])) for c in completions]

def raises(prompts, completions, **kwargs):
    raise KeyError("solution")

def too_few(prompts, completions, **kwargs):
    return [1.0] * (len(completions) - 1)

def nan(prompts, completions, **kwargs):
    return [float("nan")] * len(completions)
'''


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    "A chat model directory, a conversational jsonl dataset, a string-prompt csv, and a file of reward functions."
    root = tmp_path_factory.mktemp("real")
    model = save_tiny_chat_model(root / "qwen2", seed=0)
    with open(root / "chat.jsonl", "w") as f:
        for q, a in QUESTIONS * 4:
            f.write(json.dumps({"prompt": [{"role": "user", "content": q}], "answer": a}) + "\n")
    with open(root / "plain.csv", "w") as f:
        f.write("prompt,answer\n" + "".join(f"{q},{a}\n" for q, a in QUESTIONS * 4))
    with open(root / "noprompt.jsonl", "w") as f:
        for q, a in QUESTIONS: f.write(json.dumps({"question": q, "answer": a}) + "\n")
    (root / "rewards.py").write_text(REWARDS)
    return root, Path(model)


def _cfg(root, model, out, **kw):
    base = dict(model=str(model), dataset=str(root / "chat.jsonl"), reward=[f"{root}/rewards.py:says_answer"],
                algo="grpo", steps=2, n_prompts=2, group_size=4, max_new_tokens=8, n_eval=2, eval_every=1,
                out_dir=str(root / out), progress=False, overwrite=True, threads=1)
    return TrainConfig(**{**base, **kw})


def test_cli_dapo_on_chat_model(world):
    "The whole path from a shell: model directory, jsonl dataset, a reward file, DAPO, 3 steps."
    root, model = world
    out = root / "cli_dapo"
    exe = Path(sys.executable).parent / "rl_notes"               # the console script the package installs
    r = subprocess.run([str(exe), "train", "--model", str(model), "--dataset", str(root / "chat.jsonl"),
                        "--reward", f"{root}/rewards.py:says_answer", "--reward", f"{root}/rewards.py:short=0.5", "--algo", "dapo",
                        "--steps", "3", "--n-prompts", "2", "--group-size", "4", "--max-new-tokens", "8", "--n-eval", "2",
                        "--threads", "1", "--quiet", "--out", str(out)],
                       capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in rows if x["step"] > 0]
    assert [x["step"] for x in steps] == [1, 2, 3]
    for x in steps:
        assert math.isfinite(x["loss"]) and x["rewards/says_answer"] is not None and x["rewards/short"] is not None
        assert x["parsed"] is None                      # user reward functions have no parse check
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["reward_weights"] == [1.0, 0.5] and cfg["reward"][1].endswith("rewards.py:short")


def test_chat_prompts_and_eos(world):
    "Prompts are rendered with the chat template; generation stops at either end-of-turn id; rewards see message lists."
    root, model = world
    rows = train(_cfg(root, model, "chat", steps=1))
    last = rows[-1]
    assert last["resp_len"] <= 8 and 0 <= last["rewards/says_answer"] <= 1 and "heldout_reward" in last   # reward functions: no "accuracy"


def test_string_prompts_csv(world):
    "A csv with string prompts: no chat template applied (a TRL-style reward reading the `answer` column as strings)."
    root, model = world
    (root / "plain_rewards.py").write_text("def has(prompts, completions, answer, **kw):\n"
                                          "    assert isinstance(completions[0], str) and isinstance(prompts[0], str)\n"
                                          "    return [float(str(a) in c) for c, a in zip(completions, answer)]\n")   # csv columns arrive typed (12 -> int)
    rows = train(_cfg(root, model, "plain", dataset=str(root / "plain.csv"), reward=[f"{root}/plain_rewards.py:has"], steps=1))
    assert math.isfinite(rows[-1]["loss"])


def test_lora_reference_is_the_base(world):
    "Under LoRA (beta > 0) no reference copy is made; the KL to the base starts at 0 and the base weights never change."
    root, model = world
    from rl_notes.trainer import setup
    cfg = _cfg(root, model, "lora", lora_r=4, lora_alpha=8.0, algo="grpo")
    assert cfg.algo.beta > 0
    with setup(cfg) as run:
        assert run.ref is None
        trainable = sum(p.numel() for p in run.policy.parameters() if p.requires_grad)
        total = sum(p.numel() for p in run.policy.parameters())
        assert 0 < trainable < total / 5, (trainable, total)
    rows = train(cfg)
    steps = [r for r in rows if r["step"] > 0]
    assert abs(steps[0]["kl_ref"]) < 1e-6           # first update: policy == base, adapters start at 0 (B = 0)
    from safetensors.torch import load_file
    w = load_file(str(root / "lora" / "ckpt" / "policy.safetensors"))
    assert any("lora_" in k for k in w)


def test_bf16_and_gradient_checkpointing(world):
    root, model = world
    rows = train(_cfg(root, model, "bf16", dtype="bfloat16", gradient_checkpointing=True, steps=1))
    assert math.isfinite(rows[-1]["loss"]) and math.isfinite(rows[-1]["grad_norm"])


def test_report_to_tensorboard_and_trackio(world, tmp_path, monkeypatch):
    root, model = world
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    train(_cfg(root, model, "tb", report_to="tensorboard", steps=2))
    ea = EventAccumulator(str(root / "tb" / "tensorboard")).Reload()
    # grouped as TRL's are: train/ and eval/; with reward functions the held-out metric is a reward, not an accuracy
    assert {"train/reward", "train/loss", "eval/heldout_reward", "train/rewards/says_answer"} <= set(ea.Tags()["scalars"])
    assert [e.step for e in ea.Scalars("train/loss")] == [1, 2]
    # trackio keeps its runs in $TRACKIO_DIR, read when trackio is imported: a fresh process
    code = textwrap.dedent(f"""
        from rl_notes.trainconfig import TrainConfig
        from rl_notes.trainer import train
        train(TrainConfig(model={str(model)!r}, dataset={str(root / 'chat.jsonl')!r}, reward=[{f'{root}/rewards.py:says_answer'!r}],
                          steps=2, n_prompts=2, group_size=4, max_new_tokens=8, n_eval=0, out_dir={str(tmp_path / 'tk')!r},
                          progress=False, threads=1, report_to="trackio"))
        import trackio.sqlite_storage as s
        print("ROWS", len(s.SQLiteStorage.get_logs("rl_notes", "tk")))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ROWS 3" in r.stdout, r.stdout[-1000:]      # step 0 (its evaluation time), 1 and 2


@pytest.mark.parametrize("args, msg", [
    (["--dataset", "{root}/noprompt.jsonl"], "no `prompt` column"),
    (["--dataset", "{root}/missing.jsonl"], "does not exist"),
    (["--reward", "{root}/rewards.py:raises"], "raises"),
    (["--reward", "{root}/rewards.py:too_few"], "too_few"),
    (["--reward", "{root}/rewards.py:nan"], "nan"),
    (["--reward", "{root}/rewards.py:nothing"], "nothing"),
    (["--reward", "no_such_module_xyz:f"], "no_such_module_xyz"),
    (["--reward", "{root}/rewards.py:short=heavy"], "must be a number"),
])
def test_bad_input_is_one_line_exit_2(world, capsys, args, msg):
    root, model = world
    args = [a.format(root=root) for a in args]
    base = ["train", "--model", str(model), "--steps", "1", "--n-prompts", "2", "--group-size", "2", "--max-new-tokens", "4",
            "--n-eval", "0", "--quiet", "--threads", "1", "--out", str(root / "bad"), "--overwrite"]
    if "--dataset" not in args: base += ["--dataset", str(root / "chat.jsonl")]
    if "--reward" not in args: base += ["--reward", f"{root}/rewards.py:says_answer"]
    status = main(base + args)
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.startswith("rl_notes: error:") and len(err.splitlines()) == 1, err
    assert msg.lower() in err.lower(), err


def test_model_without_tokenizer_and_chat_without_template(world, tmp_path, capsys):
    root, model = world
    bare = tmp_path / "bare"; bare.mkdir()
    for f in model.iterdir():
        if f.name in ("config.json", "generation_config.json") or f.suffix == ".safetensors": (bare / f.name).write_bytes(f.read_bytes())
    base = ["--steps", "1", "--n-prompts", "2", "--group-size", "2", "--max-new-tokens", "4", "--n-eval", "0", "--quiet",
            "--dataset", str(root / "chat.jsonl"), "--reward", f"{root}/rewards.py:says_answer", "--overwrite"]
    assert main(["train", "--model", str(bare), "--out", str(tmp_path / "a")] + base) == 2
    err = capsys.readouterr().err.strip()
    assert "tokenizer" in err and len(err.splitlines()) == 1, err
    # the character tokenizer of the toy tasks has no chat template: conversational prompts are refused
    from rl_notes.models import build_tokenizer, tiny_llama
    tok = build_tokenizer(chars="".join(sorted(set("".join(q + a for q, a in QUESTIONS) + "0123456789+-*()=,:"))))
    m = tiny_llama(tok, hidden_size=32, num_layers=1, heads=2)
    m.save_pretrained(tmp_path / "char"); tok.save_pretrained(tmp_path / "char")
    capsys.readouterr()                                          # drop the save's progress output
    assert main(["train", "--model", str(tmp_path / "char"), "--out", str(tmp_path / "b")] + base) == 2
    err = capsys.readouterr().err.strip()
    assert "chat template" in err and len(err.splitlines()) == 1, err


def test_dataset_object_with_test_split(world):
    "A DatasetDict passed as is: its test split is held out; config.json records it by fingerprint, and a resume accepts it."
    from datasets import Dataset, DatasetDict
    from rl_notes.trainer import setup
    root, model = world
    rows = [{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in QUESTIONS]
    dd = DatasetDict(train=Dataset.from_list(rows * 2), test=Dataset.from_list(rows[:3]))
    cfg = _cfg(root, model, "dsobj", dataset=dd, steps=2, n_eval=5, save_every=1, stop_at=1)
    with setup(cfg) as run:
        assert (len(run.train_rows), len(run.test_rows)) == (16, 3)
    train(cfg)                                                   # stops after step 1, as if killed
    assert json.loads((root / "dsobj" / "config.json").read_text())["dataset"].startswith("DatasetDict(fingerprint=")
    import dataclasses
    rows_out = train(dataclasses.replace(cfg, overwrite=False, resume=True, stop_at=None))
    assert [r["step"] for r in rows_out] == [0, 1, 2]
