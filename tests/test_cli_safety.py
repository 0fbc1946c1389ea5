"""Nothing of the user's is lost, and every failure is one line: `rl_notes train` on a tiny chat model, in this process
(`rl_notes.cli.main`, as the console script calls it), each case checked for its one `rl_notes: error:` line, its exit
status, and the hashes of the user's files before and after."""
import errno, hashlib, json, os, shutil
from pathlib import Path

import pytest
import torch
from conftest import make_chat_world

from rl_notes.cli import main

REWARDS = '''
import json, sys
def says(prompts, completions, answer, **kw): return [float(a in c[0]["content"]) for c, a in zip(completions, answer)]
def judge(prompts, completions, **kw):
    for p in prompts: p.append({"role": "assistant", "content": "judge: grade this"})   # the LLM-judge pattern
    return [0.0] * len(prompts)
def turns(prompts, completions, **kw):
    with open(__file__ + ".seen", "a") as f: f.write(json.dumps([len(p) for p in prompts]) + "\\n")
    return [0.0] * len(prompts)
def exits(prompts, completions, **kw): sys.exit(3)
def one_row(prompts, completions, answer, **kw): return [1 / (int(a) % 2) for a in answer]   # fails on even answers
def huge(prompts, completions, **kw): return [3e38] * len(prompts)
def varied(prompts, completions, **kw): return [float(sum(map(ord, c[0]["content"])) % 3) for c in completions]   # advantages not all 0: the weights move
def ctrl_c(prompts, completions, **kw): raise KeyboardInterrupt
def sigterm(prompts, completions, **kw):
    import os, signal
    if not os.path.exists(__file__ + ".term"): open(__file__ + ".term", "w").close(); os.kill(os.getpid(), signal.SIGTERM)   # a scheduler's stop during step 1
    return [0.0] * len(prompts)
def sighup(prompts, completions, **kw):
    import os, signal
    if not os.path.exists(__file__ + ".hup"): open(__file__ + ".hup", "w").close(); os.kill(os.getpid(), signal.SIGHUP)
    return [0.0] * len(prompts)
def sigint(prompts, completions, **kw):
    import os, signal
    if not os.path.exists(__file__ + ".sent"): open(__file__ + ".sent", "w").close(); os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C during step 1
    return [0.0] * len(prompts)
'''


def digest(path) -> dict:
    "sha256 of every file under `path` (or of the file): what 'untouched' is checked against."
    p = Path(path)
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    return {str(f.relative_to(p) if p.is_dir() else f.name): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    "A tiny chat model directory, a conversational jsonl dataset and a file of reward functions."
    return make_chat_world(tmp_path_factory.mktemp("safety"), REWARDS)


@pytest.fixture(autouse=True)
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("RL_NOTES_CACHE", str(tmp_path / "cache"))   # logs, content hashes and datasets' copies stay in the test
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return tmp_path / "cache"


def args(world, out, *extra, dataset=None, reward="says", model=None):
    base = ["train", "--model", str(model or world / "model"), "--dataset", str(dataset or world / "chat.jsonl"),
            "--steps", "2", "--n-prompts", "2", "--group-size", "2", "--max-new-tokens", "4", "--n-eval", "0", "--quiet",
            "--threads", "1", "--out", str(out)]
    rewards = [r for x in (reward if isinstance(reward, (list, tuple)) else [reward]) for r in ("--reward", f"{world}/rewards.py:{x}")]
    return base + rewards + [str(e) for e in extra]


def one_line(capsys, status, want, *msgs) -> str:
    "The run's stderr is one `rl_notes: error:` line holding each of `msgs`, and the exit status is `want`."
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.strip() and not l.lstrip().startswith(("warnings.warn", "/"))]   # warnings print their source line
    lines = [l for l in lines if "Warning" not in l and not l.startswith(("rl_notes: Ctrl-C:", "rl_notes: SIGTERM:", "rl_notes: SIGHUP:"))]   # the notice at the first signal
    assert status == want, err
    assert len(lines) == 1 and lines[0].startswith("rl_notes: error:"), err
    for m in msgs: assert m in lines[0], lines[0]
    return lines[0]


# (1) the output directory belongs to the run

@pytest.mark.parametrize("mode", [[], ["--overwrite"], ["--resume"]])
def test_out_holding_a_model_is_refused(world, tmp_path, capsys, mode):
    model = tmp_path / "model"; shutil.copytree(world / "model", model)
    before = digest(model)
    one_line(capsys, main(args(world, model, *mode, model=model)), 2, "holds a model (config.json and weights)", "nothing there was changed")
    assert digest(model) == before


def test_overwrite_never_deletes_what_a_run_did_not_write(world, tmp_path, capsys):
    proj = tmp_path / "proj"; (proj / "ckpt").mkdir(parents=True); (proj / "ckpt" / "epoch9.pt").write_text("w")
    one_line(capsys, main(args(world, proj, "--overwrite")), 2, "holds files that rl_notes did not write (ckpt)")
    assert (proj / "ckpt" / "epoch9.pt").read_text() == "w"
    from datasets import Dataset
    Dataset.from_list([{"prompt": "1+1="}]).save_to_disk(str(tmp_path / "saved")); capsys.readouterr()   # its progress bar
    before = digest(tmp_path / "saved")
    one_line(capsys, main(args(world, tmp_path / "saved", "--overwrite")), 2, "holds a saved dataset")
    assert digest(tmp_path / "saved") == before


def test_overwrite_removes_only_the_runs_files(world, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "1")) == 0
    (run / "notes.txt").write_text("mine")
    assert (run / "model" / "config.json").is_file()                                  # the run's exported model
    (run / "model" / "stale").write_text("from the previous run")
    assert main(args(world, run, "--steps", "1", "--overwrite")) == 0
    assert (run / "notes.txt").read_text() == "mine" and "model" in json.loads((run / ".rl_notes_run").read_text())["files"]
    assert not (run / "model" / "stale").exists() and (run / "model" / "config.json").is_file()   # the old export went with the old run


def test_disk_full_keeps_the_rows_and_the_last_checkpoint(world, tmp_path, capsys, monkeypatch):
    "ENOSPC (injected into os.write) while step 2's row is appended: half the line is written, then the disk is full."
    run, real = tmp_path / "run", os.write
    def write(fd, data):
        try: target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError: target = ""
        if target.endswith("metrics.jsonl") and b'"step": 2' in bytes(data):
            real(fd, bytes(data)[:7]); raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)
    monkeypatch.setattr(os, "write", write)
    line = one_line(capsys, main(args(world, run, "--steps", "3", "--save-every", "1")), 1,
                    "[Errno 28] No space left on device: could not append the metric row of step 2", "the last checkpoint (step 1)")
    assert "traceback in" in line
    rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]   # every line whole, strict JSON
    assert [r["step"] for r in rows] == [0, 1]
    from rl_notes.rundir import RunDir
    assert RunDir(run).state()["step"] == 1                                           # the checkpoint verifies (sha256 of each file)
    assert "Traceback" in (run / "log.txt").read_text()


def test_metrics_are_strict_json(world, tmp_path, capsys, monkeypatch):
    import rl_notes.trainer as T
    monkeypatch.setattr(T, "heldout", lambda run: {"heldout_acc": float("nan"), "time_eval": 0.0})   # with reward functions it is logged as heldout_reward
    with pytest.warns(UserWarning, match=r"metric\(s\) \['heldout_reward'\] of step 0 are not finite"):
        assert main(args(world, tmp_path / "run", "--steps", "1")) == 0
    rows = [json.loads(l, parse_constant=lambda c: pytest.fail(f"{c} in metrics.jsonl")) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["heldout_reward"] is None


# (2) rewards see copies

def test_a_reward_that_edits_its_prompts_changes_nothing_else(world, tmp_path, capsys):
    seen = world / "rewards.py.seen"; seen.unlink(missing_ok=True)
    data = digest(world / "chat.jsonl")
    assert main(args(world, tmp_path / "run", "--steps", "3", reward=["judge", "turns"])) == 0
    lengths = [n for l in seen.read_text().splitlines() for n in json.loads(l)]
    assert len(lengths) == 3 * 4 and set(lengths) == {1}        # every call of `turns` saw the one user message
    assert digest(world / "chat.jsonl") == data


# (3) resume and caches know content

def test_resume_compares_content_not_spelling(world, tmp_path, capsys, monkeypatch):
    data = tmp_path / "chat.jsonl"; shutil.copy(world / "chat.jsonl", data)
    rewards = tmp_path / "rw"; rewards.mkdir(); shutil.copy(world / "rewards.py", rewards / "rewards.py")
    run = tmp_path / "run"
    base = lambda *a, d=data: args(world, run, "--save-every", "1", *a, dataset=d)
    assert main(base("--steps", "1")) == 0
    monkeypatch.chdir(tmp_path)
    assert main(base("--steps", "2", "--resume", d=Path("./chat.jsonl"))) == 0            # the same file spelled differently
    with open(data, "a") as f: f.write(json.dumps({"prompt": [{"role": "user", "content": "new"}], "answer": "x"}) + "\n")
    one_line(capsys, main(base("--steps", "3", "--resume")), 2, "dataset changed since that checkpoint was written", "--accept-changed")
    with pytest.warns(UserWarning, match=r"resuming on changed dataset \(accept_changed=True\)"):
        assert main(base("--steps", "3", "--resume", "--accept-changed")) == 0
    assert [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2, 3]
    moved = tmp_path / "moved"; shutil.copytree(world / "model", moved)                  # the model moved: the same content
    assert main(base("--steps", "4", "--resume", "--model", moved)) == 0
    with open(world / "rewards.py") as f: text = f.read()
    try:
        (world / "rewards.py").write_text(text + "\n# edited\n")                          # the reward file changed at its path
        one_line(capsys, main(base("--steps", "5", "--resume", "--model", moved)), 2, "reward[0] changed since that checkpoint")
    finally: (world / "rewards.py").write_text(text)


def test_lab_cache_keys_on_content(world, tmp_path):
    from rl_notes.lab import _lab_key, lab_key
    from rl_notes.trainconfig import TrainConfig
    data = tmp_path / "chat.jsonl"; shutil.copy(world / "chat.jsonl", data)
    cfg = TrainConfig(model=str(world / "model"), dataset=str(data), reward=[f"{world}/rewards.py:says"])
    k = _lab_key(cfg, "code")
    with open(data, "a") as f: f.write("\n")                                            # the same path, other bytes
    assert _lab_key(cfg, "code") != k
    assert _lab_key(TrainConfig(model="m"), "code") == "a671a9b8b7543f64"               # a built-in task reads no file: key as before
    assert callable(lab_key)


# (4) float16, rewards that exit, raise on one row or overflow

@pytest.mark.parametrize("reward, msgs, status", [
    ("exits", ["reward function `exits` called sys.exit(3)", "(at step 1)"], 2),
    ("one_row", ["`one_row` raised ZeroDivisionError", "; it fails on completion", "(row ", "prompt '"], 2),
    (["huge", "huge"], ["overflows float32", "'huge': (3.", "'huge_2': (3."], 2),
    ("ctrl_c", ["interrupted (Ctrl-C)", "no checkpoint and the metric rows"], 130),
])
def test_reward_failures_are_one_line(world, tmp_path, capsys, reward, msgs, status):
    data = digest(world / "chat.jsonl")
    one_line(capsys, main(args(world, tmp_path / "run", "--task-arg", "max_digits=2", reward=reward)), status, *msgs)
    assert digest(world / "chat.jsonl") == data


def test_ctrl_c_stops_after_the_step_with_a_checkpoint(world, tmp_path, capsys):
    (world / "rewards.py.sent").unlink(missing_ok=True)
    run = tmp_path / "run"
    one_line(capsys, main(args(world, run, "--steps", "3", reward="sigint")), 130, "interrupted (Ctrl-C) (at step 1); the last checkpoint (step 1)")
    assert [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    assert main(args(world, run, "--steps", "2", "--resume", reward="sigint")) == 0           # resumes from that checkpoint
    assert [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]


@pytest.mark.parametrize("sig, status", [("sigterm", 143), ("sighup", 129)])
def test_sigterm_and_sighup_stop_as_ctrl_c_does(world, tmp_path, capsys, sig, status):
    "A job scheduler's SIGTERM (or a closed terminal's SIGHUP) under the default --save-every 0: the step ends, a checkpoint is written, resume continues to the metrics of an uninterrupted run."
    for f in (".term", ".hup"): (world / f"rewards.py{f}").unlink(missing_ok=True)
    run, ref = tmp_path / "run", tmp_path / "ref"
    one_line(capsys, main(args(world, run, "--steps", "3", reward=sig)), status, f"interrupted ({sig.upper()}) (at step 1); the last checkpoint (step 1)")
    assert [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    assert main(args(world, run, "--steps", "3", "--resume", reward=sig)) == 0
    assert main(args(world, ref, "--steps", "3", reward=sig)) == 0                          # the same run, never stopped
    capsys.readouterr()
    strip = lambda d: [{k: v for k, v in json.loads(l).items() if not k.startswith("time")} for l in (d / "metrics.jsonl").read_text().splitlines()]
    assert strip(run) == strip(ref)


@pytest.mark.parametrize("moment", ["generation", "update", "checkpoint", "export"])
def test_sigterm_at_each_moment_resumes_to_the_same_run(world, tmp_path, capsys, monkeypatch, moment):
    "SIGTERM arriving while step 1 generates, updates, writes its checkpoint or exports its model: exit 143, and --resume reaches the metrics and weights of a run never stopped."
    import signal
    import rl_notes.trainer as T
    from rl_notes.rundir import RunDir
    from safetensors.torch import load_file
    import rl_notes.run as R
    owner, name = {"generation": (R, "generate"), "update": (T, "update"), "checkpoint": (RunDir, "save"), "export": (T, "export_model")}[moment]
    real, sent = getattr(owner, name), []
    def signalled(*a, **k):
        if not sent: sent.append(1); os.kill(os.getpid(), signal.SIGTERM)   # the handler runs here, in the middle of the call
        return real(*a, **k)
    run, ref = tmp_path / "run", tmp_path / "ref"
    extra = ("--steps", "3", "--save-steps", "1", "--learning-rate", "0.01")
    monkeypatch.setattr(owner, name, signalled)
    one_line(capsys, main(args(world, run, *extra, reward="varied")), 143, "interrupted (SIGTERM) (at step 1); the last checkpoint (step 1)")
    monkeypatch.setattr(owner, name, real)
    assert main(args(world, run, *extra, "--resume", reward="varied")) == 0
    assert main(args(world, ref, *extra, reward="varied")) == 0                            # the same run, never stopped
    capsys.readouterr()
    strip = lambda d: [{k: v for k, v in json.loads(l).items() if not k.startswith("time")} for l in (d / "metrics.jsonl").read_text().splitlines()]
    assert strip(run) == strip(ref) and [r["step"] for r in strip(ref)] == [0, 1, 2, 3]
    a, b = load_file(run / "model" / "model.safetensors"), load_file(ref / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = load_file(world / "model" / "model.safetensors")
    assert any(not torch.equal(a[k], start[k]) for k in a)                                      # the steps moved the weights


def test_an_unwritable_cache_root_is_one_line(world, tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("x"); monkeypatch.setenv("RL_NOTES_CACHE", str(tmp_path / "file"))   # a file where a directory should be
    one_line(capsys, main(args(world, tmp_path / "run")), 2, "could not be read as json: NotADirectoryError", "file/datasets")
    assert (tmp_path / "file").read_text() == "x"


def test_float16_without_lora_is_refused(world, tmp_path, capsys):
    one_line(capsys, main(args(world, tmp_path / "run", "--dtype", "float16")), 2, "use dtype='bfloat16' (--dtype bfloat16) or LoRA (--lora-r R)")
    assert not (tmp_path / "run").exists()


# (5) a last catch, and checks before the model loads

def test_an_unexpected_error_is_one_line_with_its_traceback_logged(world, tmp_path, capsys, monkeypatch):
    import rl_notes.trainer as T
    def boom(*a, **k): raise RuntimeError("CUDA error: an illegal memory access\nmore lines")
    monkeypatch.setattr(T, "update", boom)
    line = one_line(capsys, main(args(world, tmp_path / "run")), 1, "RuntimeError: CUDA error: an illegal memory access (at step 1) (in ",
                    "test_cli_safety.py:", "no checkpoint and the metric rows")
    assert "Traceback" in (tmp_path / "run" / "log.txt").read_text() and str(tmp_path / "run" / "log.txt") in line


def _model_copy(world, tmp_path, name, **config):
    m = tmp_path / name; shutil.copytree(world / "model", m)
    c = json.loads((m / "config.json").read_text()); c.update(config); (m / "config.json").write_text(json.dumps(c))
    return m


def _rows(path, prompts):
    with open(path, "w") as f:
        for p in prompts: f.write(json.dumps({"prompt": p, "answer": "1"}) + "\n")
    return path


def test_checks_before_the_model_loads(world, tmp_path, capsys, monkeypatch):
    def fails(*extra, msgs, **kw):
        one_line(capsys, main(args(world, tmp_path / "run", *extra, **kw)), 2, *msgs)
        assert not (tmp_path / "run" / "config.json").exists()
    user = lambda s: [{"role": "user", "content": s}]
    fails(model=_model_copy(world, tmp_path, "small_vocab", vocab_size=100), msgs=["its tokenizer has 300 tokens but the model's embedding only 100 rows"])
    fails("--max-new-tokens", "100000", msgs=["TrainConfig.max_new_tokens (100000) leaves no room for a prompt: the model has 2048 positions"])
    fails(dataset=_rows(tmp_path / "long.jsonl", [user("x" * 100_000)] * 20), msgs=["prompt", "(100", "characters)", "more than the model's 2048"])
    fails(dataset=_rows(tmp_path / "empty.jsonl", ["", "a", "b"] * 4), msgs=["prompt", "is empty: ''"])
    fails(dataset=_rows(tmp_path / "roles.jsonl", [user("a")] * 10 + [[{"role": "critic", "content": "b"}]] + [user("c")] * 5),
          model=(lambda m: ((m / "chat_template.jinja").write_text(
              "{% for m in messages %}{% if m['role'] not in ['user', 'assistant', 'system'] %}{{ raise_exception('unknown role ' + m['role']) }}"
              "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n"), m)[1])(_model_copy(world, tmp_path, "strict_roles")),
          msgs=["the chat template fails on it", "unknown role critic"])
    fails(reward=[], msgs=["reward_weights are all 0"], *["--reward", f"{world}/rewards.py:says=0"])
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    fails("--lora-r", "4", msgs=['TrainConfig.lora_r > 0 needs peft, which is not installed: pip install "rl_notes[lora]"'])


# (6) data errors say where

@pytest.mark.parametrize("name, data, msg", [
    ("bad.jsonl", b'{"prompt": "a"}\n{"prompt": "b",, }\n', "line 2, column 16: not JSON"),
    ("empty.jsonl", b"", "is empty"),
    ("latin1.jsonl", '{"prompt": "caf\u00e9"}\n'.encode("latin-1"), "line 1, column 16: byte 0xe9 is not UTF-8"),
    ("utf16.jsonl", '{"prompt": "a"}\n'.encode("utf-16"), "is UTF-16 encoded"),
    ("cut.jsonl", b'{"prompt": "a"}\n{"prompt": "b', "the file ends inside this line"),
    ("quote.csv", b'prompt,answer\n"1+1=,2\n', "line 2: bad CSV"),
])
def test_data_errors_say_where(world, tmp_path, capsys, name, data, msg):
    f = tmp_path / name; f.write_bytes(data)
    one_line(capsys, main(args(world, tmp_path / "run", dataset=f)), 2, name, msg)
    assert f.read_bytes() == data


def test_saved_datasets(world, tmp_path, capsys, cache_root):
    from datasets import Dataset, DatasetDict
    rows = [{"prompt": [{"role": "user", "content": f"q{i}"}], "answer": "1"} for i in range(8)]
    DatasetDict(train=Dataset.from_list(rows), test=Dataset.from_list(rows).select([])).save_to_disk(str(tmp_path / "d")); capsys.readouterr()
    one_line(capsys, main(args(world, tmp_path / "run", dataset=tmp_path / "d")), 2, "split 'test'", "has no rows")
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "e")); capsys.readouterr()
    st = json.loads((tmp_path / "e" / "state.json").read_text())
    st["_data_files"] = [{"filename": "../../outside.arrow"}]; (tmp_path / "e" / "state.json").write_text(json.dumps(st))
    one_line(capsys, main(args(world, tmp_path / "run", dataset=tmp_path / "e")), 2, "names the data file '../../outside.arrow', outside the directory")
    assert main(args(world, tmp_path / "ok", "--steps", "1")) == 0
    assert any((cache_root / "datasets").iterdir())                  # datasets' copy of the jsonl lives under the cache root


# (7) a reward failing on one process of a data-parallel run, an unwritable TensorBoard directory, a missing extra

RANK1 = '''
import os
def rank1(prompts, completions, **kw):
    if int(os.environ["RANK"]) == 1: raise KeyError("judge offline")   # only the second process fails
    return [0.0] * len(prompts)
'''


def library_frames(stderr: str) -> list[str]:
    """The lines of `stderr` that point into the rl_notes package: any line naming the package directory (a traceback
    frame `File "<package dir>/x.py"`, a warning's `<package dir>/x.py:12:`), and any traceback frame of one of the
    package's modules in a directory named rl_notes (an installed copy). Neither depends on the checkout's path: the venv's
    python and torchrun, which lie inside a checkout that is itself named rl_notes, are not the package."""
    import re, rl_notes
    pkg = os.path.dirname(os.path.abspath(rl_notes.__file__))
    modules = {f for f in os.listdir(pkg) if f.endswith(".py")}
    frame = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+')
    hits = []
    for line in stderr.splitlines():
        m = frame.match(line)
        p = Path(m["path"]) if m else None
        if pkg + os.sep in line or (p is not None and p.parent.name == "rl_notes" and p.name in modules): hits.append(line)
    return hits


def test_library_frames_do_not_depend_on_the_checkout_path():
    import rl_notes
    pkg = os.path.dirname(os.path.abspath(rl_notes.__file__))
    ours = f'  File "{os.path.join(pkg, "trainer.py")}", line 12, in train'
    warning = f"{os.path.join(pkg, 'trainer.py')}:40: UserWarning: x"
    installed = '  File "/usr/lib/python3/site-packages/rl_notes/cli.py", line 3, in main'
    venv = '  File "/home/me/my work/rl_notes/.venv/bin/torchrun", line 10, in <module>'           # a checkout named rl_notes
    torch_frame = '  File "/home/me/rl_notes/.venv/lib/python3.12/site-packages/torch/distributed/run.py", line 9, in main'
    script = '  File "/tmp/pytest-of-me/test_x0/rl_notes_main.py", line 1, in <module>'
    text = "\n".join(["Traceback (most recent call last):", venv, torch_frame, script, "rl_notes: error: ...",
                      "[rank1]: /home/me/rl_notes/.venv/bin/python failed"])
    assert library_frames(text) == []
    assert library_frames("\n".join([text, ours, warning, installed])) == [ours, warning, installed]


@pytest.mark.torchrun
@pytest.mark.skipif(not (Path(__import__("sys").executable).parent / "torchrun").exists(), reason="torchrun not installed")
def test_a_reward_failing_on_one_rank_stops_every_rank(world, tmp_path):
    import socket, subprocess, sys
    (tmp_path / "r.py").write_text(RANK1)
    script = tmp_path / "rl_notes_main.py"; script.write_text("import sys; from rl_notes.cli import main; sys.exit(main())")
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    argv = args(world, tmp_path / "run", reward=[])[1:] + ["--reward", f"{tmp_path}/r.py:rank1", "--no-shard"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "ACCELERATE_USE_CPU": "true"}
    data = digest(world / "chat.jsonl")
    p = subprocess.run([str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master_port", str(port), str(script), "train", *argv],
                       capture_output=True, text=True, env=env, timeout=120)   # a hang on a collective would run into the timeout
    assert p.returncode != 0, p.stderr[-3000:]
    lines = [l for l in p.stderr.splitlines() if "rl_notes: error:" in l]
    assert len(lines) == 1, p.stderr[-3000:]
    for m in ("reward function `rank1` raised KeyError: 'judge offline'", "(row ", "on rank 1 of 2", "(at step 1)"): assert m in lines[0], lines[0]
    # no traceback of the run and no second line from rank 0 (before: a gloo "Connection closed by peer" error); torchrun still
    # prints its own report, and may stop rank 0 with SIGTERM on its way out, once rank 1's line and log are written
    assert not library_frames(p.stderr), p.stderr[-3000:]
    assert "Traceback" in (tmp_path / "run" / "log.txt").read_text() and "judge offline" in (tmp_path / "run" / "log.txt").read_text()
    assert digest(world / "chat.jsonl") == data


def _no_model_load(monkeypatch):
    "Loading the weights fails the test: what is checked must be refused before."
    import rl_notes.run as R
    monkeypatch.setattr(R, "load_models", lambda *a, **k: pytest.fail("the model was loaded"))


def test_an_unwritable_tensorboard_directory_is_one_line(world, tmp_path, capsys, monkeypatch):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install 'rl_notes[tensorboard]')")
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "1", "--report-to", "tensorboard")) == 0 and (run / "tensorboard").is_dir()
    shutil.rmtree(run / "tensorboard"); (run / "tensorboard").write_text("mine")   # a file where TensorBoard's directory must be: fails even as root
    before = digest(run); capsys.readouterr(); _no_model_load(monkeypatch)
    one_line(capsys, main(args(world, run, "--steps", "2", "--report-to", "tensorboard", "--resume")), 2,
             f'TrainConfig.report_to="tensorboard" writes to {str(run / "tensorboard")!r}, which cannot be created', "is a file, not a directory")
    assert digest(run) == before                                                   # the metrics, the checkpoint and the file untouched


def test_math_without_math_verify_is_one_line(world, tmp_path, capsys, monkeypatch):
    import datasets
    monkeypatch.setitem(__import__("sys").modules, "math_verify", None)             # as if math-verify were not installed
    _no_model_load(monkeypatch)
    with open(tmp_path / "math.jsonl", "w") as f:
        for i in range(8): f.write(json.dumps({"problem": f"What is {i}+1?", "answer": str(i + 1)}) + "\n")
    bars = datasets.is_progress_bar_enabled(); datasets.disable_progress_bars()      # the math task's column cast draws a progress bar
    try: status = main(args(world, tmp_path / "run", "--task", "math", "--task-arg", f"data_files={tmp_path / 'math.jsonl'}", reward=[]))
    finally:
        if bars: datasets.enable_progress_bars()
    one_line(capsys, status, 2, 'TrainConfig.task="math" needs math_verify, which is not installed', 'pip install "rl_notes[math]"')
    assert not (tmp_path / "run").exists()


def test_critic_init_with_a_causal_lm_says_what_to_pass(world, tmp_path, capsys):
    one_line(capsys, main(args(world, tmp_path / "run", "--algo", "ppo", "--critic-init", str(world / "model"))), 2,
             "is a causal LM", "pass a sequence-classification checkpoint with one label")
