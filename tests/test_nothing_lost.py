"""Nothing of the user's is lost, nothing hangs, and every refusal is one line: each case through `rl_notes.cli.main`, checked
for its exit status, the one line the user sees, and the sha256 of every user file before and after."""
import hashlib, io, json, os, shutil, sys
from pathlib import Path

import pytest
from conftest import make_chat_world

from rl_notes.cli import main


def digest(*paths) -> dict:
    "sha256 of every file under each path (or of the file; a symlink by its target's bytes)."
    out = {}
    for p in map(Path, paths):
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
        out.update({str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files})
    return out


def one_line(capsys, status, want, prefix, *msgs) -> str:
    "stderr is one line starting with `prefix` and holding each of `msgs`; the exit status is `want`."
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.strip() and not l.lstrip().startswith(("warnings.warn", "/")) and "Warning" not in l]
    assert status == want, err
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    for m in msgs: assert m in lines[0], lines[0]
    return lines[0]


DOC = "rl_notes doctor: error:"


def rows_file(p, n=10, extra=None):
    p.write_text("".join(json.dumps({"step": i, "reward": 0.1 * i, "entropy": 1.0, **(extra or {})}) + "\n" for i in range(1, n + 1)))
    return p


# (1) the doctor reads regular files only, parses everything into one line, and never writes onto its input

@pytest.mark.parametrize("kind", ["fifo", "device", "loop", "config_fifo"])
def test_doctor_reads_regular_files_only(tmp_path, capsys, kind):
    if kind == "fifo": os.mkfifo(f := tmp_path / "metrics.jsonl"); msg = "a FIFO (named pipe), not a regular file"
    elif kind == "device": f, msg = "/dev/zero", "a device, not a regular file"
    elif kind == "loop": os.symlink("loop", f := tmp_path / "loop"); msg = "too many levels of symbolic links"
    else:
        f = tmp_path / "run"; f.mkdir(); rows_file(f / "metrics.jsonl", extra={"resp_len": 3})
        os.mkfifo(f / "config.json"); msg = "config.json: a FIFO (named pipe), not a regular file"
    one_line(capsys, main(["doctor", str(f)]), 2, DOC, msg)


def test_doctor_size_guard(tmp_path, capsys, monkeypatch):
    import rl_notes.runlogs as logs                                      # the doctor's log reader
    monkeypatch.setattr(logs, "MAX_BYTES", 100)
    one_line(capsys, main(["doctor", str(rows_file(tmp_path / "m.jsonl"))]), 2, DOC, "bytes, more than the doctor reads")


@pytest.mark.parametrize("name, data, msg", [
    ("deep.jsonl", b'{"step": 1, "reward": 1}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n", "deep.jsonl:2: column 1: nested deeper"),
    ("state/trainer_state.json", b"[" * 100_000 + b"]" * 100_000, "trainer_state.json:1: column 1: nested deeper"),
    ("nan_step.jsonl", b'{"step": NaN, "reward": 1}\n', "nan_step.jsonl: row 1: step nan is not a finite number"),
    ("inf_step.jsonl", b'{"step": Infinity, "reward": 1}\n', "row 1: step inf is not a finite number"),
    ("big_step.jsonl", b'{"step": 1' + b"0" * 400 + b', "reward": 1}\n', "row 1: step inf is not a finite number"),
    ("latin1.jsonl", '{"step": 1, "x": "caf\u00e9"}\n'.encode("latin-1"), "latin1.jsonl:1: column 22: byte 0xe9 is not UTF-8"),
])
def test_doctor_parse_failures_are_one_line(tmp_path, capsys, name, data, msg):
    f = tmp_path / name; f.parent.mkdir(exist_ok=True); f.write_bytes(data); before = digest(f)
    one_line(capsys, main(["doctor", str(f)]), 2, DOC, msg)
    assert digest(f) == before


def test_doctor_counts_values_that_are_not_numbers(tmp_path, capsys):
    "An integer beyond a float's range, verl's 'n/a' or a list: skipped and counted in the report, never an exception."
    f = tmp_path / "v.jsonl"
    f.write_text("".join(json.dumps({"step": i, "data": {"actor/entropy": 1.0, "critic/score/mean": "n/a" if i == 2 else 0.5,
                                                          "val-core/x/acc/mean@1": [1, 2] if i == 3 else 0.4}}) + "\n" for i in range(1, 6))
                 + '{"step": 6, "data": {"actor/entropy": 1' + "0" * 400 + "}}\n")
    assert main(["doctor", str(f)]) == 0
    assert "values skipped (not a finite number): 3 (actor/entropy x1, critic/score/mean x1, val-core/x/acc/mean@1 x1)" in capsys.readouterr().out
    assert main(["doctor", str(f), "--json", "-"]) == 0                      # --json -: JSON only
    assert json.loads(capsys.readouterr().out)["dropped"] == {"actor/entropy": 1, "critic/score/mean": 1, "val-core/x/acc/mean@1": 1}


@pytest.mark.parametrize("enc, sep", [("utf-8-sig", ";"), ("utf-8", "\t"), ("utf-8-sig", ",")])
def test_doctor_csv_bom_and_delimiter(tmp_path, capsys, enc, sep):
    f = tmp_path / "export.csv"
    f.write_bytes((f"step{sep}reward{sep}entropy\n" + "".join(f"{i}{sep}{0.1 * i}{sep}1.0\n" for i in range(1, 11))).encode(enc))
    assert main(["doctor", str(f), "--json", "-"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["metrics"] == ["entropy", "reward"] and rep["n_steps"] == 10 and rep["unmapped"] == []


def test_doctor_map_one_source_twice_is_refused(tmp_path, capsys):
    f = rows_file(tmp_path / "m.jsonl", extra={"iter": 1})
    one_line(capsys, main(["doctor", str(f), "--map", "iter=step", "--map", "iter=entropy"]), 2, DOC,
             "--map maps 'iter' twice (iter=step, iter=entropy)")


@pytest.mark.parametrize("opt", ["--json", "--png"])
def test_doctor_never_writes_onto_its_input(tmp_path, capsys, opt):
    run = tmp_path / "run"; run.mkdir(); f = rows_file(run / "metrics.jsonl", extra={"resp_len": 3}); before = digest(run)
    for target, force in ((f, []), (f, ["--force"]), (run / "config.json", ["--force"])):
        if target.name == "config.json": target.write_text("{}"); before = digest(run)
        one_line(capsys, main(["doctor", str(run), opt, str(target), *force]), 2, DOC,
                 "is the file the doctor reads" if force or target == f else "exists")
        assert digest(run) == before
    os.symlink(f, link := tmp_path / "link.json")                   # through a link to the input: refused too
    one_line(capsys, main(["doctor", str(f), opt, str(link), "--force"]), 2, DOC, "is the file the doctor reads")
    assert digest(run) == before


def test_doctor_outputs_are_atomic_and_never_replace_a_users_file(tmp_path, capsys):
    f = rows_file(tmp_path / "m.jsonl"); mine = tmp_path / "report.json"; mine.write_text("my notes"); png = tmp_path / "d.png"
    one_line(capsys, main(["doctor", str(f), "--json", str(mine), "--png", str(png)]), 2, DOC,
             f"--json '{mine}' exists; nothing was written: pass --force")
    assert mine.read_text() == "my notes" and not png.exists()
    assert main(["doctor", str(f), "--json", str(mine), "--png", str(png), "--force"]) == 0
    assert json.loads(mine.read_text())["source"] == "csv" and png.read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.png", "m.jsonl", "report.json"]     # no temp file left
    target = tmp_path / "users_file"; target.write_text("keep"); os.symlink(target, link := tmp_path / "out.json")
    assert main(["doctor", str(f), "--json", str(link), "--force"]) == 0                     # the link is replaced, not followed
    assert target.read_text() == "keep" and not link.is_symlink()
    capsys.readouterr()


def test_doctor_broken_pipe_is_quiet(tmp_path, capsys, monkeypatch):
    "`rl_notes doctor RUN | head`: stdout closes; no 'Broken pipe' line, status 0, and the --json file is written before any printing."
    class Closed(io.StringIO):
        def write(self, s): raise BrokenPipeError(32, "Broken pipe")
        def fileno(self): raise io.UnsupportedOperation("fileno")
    f = rows_file(tmp_path / "m.jsonl")
    monkeypatch.setattr(sys, "stdout", Closed())
    assert main(["doctor", str(f), "--json", str(tmp_path / "r.json")]) == 0
    monkeypatch.undo()
    assert capsys.readouterr().err == "" and json.loads((tmp_path / "r.json").read_text())["n_steps"] == 10


# train: a tiny chat model, a chat dataset and a reward file (as in test_cli_safety.py)

REWARDS = '''
def says(prompts, completions, answer, **kw): return [float(a in c[0]["content"]) for c, a in zip(completions, answer)]
'''


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    "A tiny chat model directory, a conversational jsonl dataset and a file of reward functions."
    return make_chat_world(tmp_path_factory.mktemp("lost"), REWARDS)


@pytest.fixture(autouse=True)
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("RL_NOTES_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return tmp_path / "cache"


def args(world, out, *extra, dataset=None, reward=None, model=None):
    return ["train", "--model", str(model or world / "model"), "--dataset", str(dataset or world / "chat.jsonl"),
            "--steps", "2", "--n-prompts", "2", "--group-size", "2", "--max-new-tokens", "4", "--n-eval", "0", "--quiet",
            "--threads", "1", "--out", str(out), "--reward", f"{reward or world / 'rewards.py'}:says"] + [str(e) for e in extra]


ERR = "rl_notes: error:"


# (2) --overwrite deletes only what the marker lists, never what the new run reads

def test_overwrite_keeps_what_the_new_run_reads(world, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "1")) == 0
    shutil.copy(world / "chat.jsonl", data := run / "eval-mydata.json")          # a dataset named like a run's evaluation
    (run / "tensorboard").mkdir(); shutil.copy(world / "rewards.py", rew := run / "tensorboard" / "rewards.py")   # inside a run name
    before = digest(data, rew)
    assert main(args(world, run, "--steps", "1", "--overwrite", dataset=data, reward=rew)) == 0
    assert digest(data, rew) == before
    assert json.loads((run / ".rl_notes_run").read_text())["files"] == ["config.json", "metrics.jsonl", "ckpt", "done.json", "log.txt",
                                                                         "tensorboard", "wandb", "model", "doctor_findings.jsonl"]
    capsys.readouterr()


# (3) the exported model records its step; a kill, a failed export or a symlink never leaves a wrong or a user's model

def test_a_symlink_at_model_tmp_is_never_followed(world, tmp_path, capsys):
    from rl_notes.report import export_step
    run, users = tmp_path / "run", tmp_path / "users_model"
    assert main(args(world, run, "--steps", "1")) == 0
    shutil.copytree(world / "model", users); before = digest(users)
    for name in ("model.tmp", "model.old"): os.symlink(users, run / name)
    assert main(args(world, run, "--steps", "2", "--resume")) == 0
    assert digest(users) == before and export_step(run / "model") == 2
    assert not os.path.lexists(run / "model.tmp") and not os.path.lexists(run / "model.old")
    capsys.readouterr()


@pytest.mark.parametrize("name", ["ckpt.tmp", "ckpt.old", "ckpt"])
def test_a_symlink_at_a_checkpoint_name_is_never_followed(world, tmp_path, capsys, name):
    "A link at ckpt.tmp or ckpt.old: removed (a warning names it), never followed, never wedging the run; a link at ckpt: one line, nothing read."
    run, users = tmp_path / "run", tmp_path / "users_dir"
    assert main(args(world, run, "--steps", "1", "--save-every", "1")) == 0
    shutil.copytree(world / "model", users); before = digest(users)
    if name == "ckpt": shutil.rmtree(run / "ckpt")
    os.symlink(users, run / name)
    if name == "ckpt":
        capsys.readouterr()
        one_line(capsys, main(args(world, run, "--steps", "2", "--resume", "--save-every", "1")), 2, ERR, "is a link", "nothing was read or changed")
        assert digest(users) == before and (run / "ckpt").is_symlink(); return
    for steps in ("2", "3"):                                            # trains on, and the next resume still works
        assert main(args(world, run, "--steps", steps, "--resume", "--save-every", "1")) == 0
    capsys.readouterr()
    assert digest(users) == before and not (run / "ckpt").is_symlink()
    assert not os.path.lexists(run / "ckpt.tmp") and not os.path.lexists(run / "ckpt.old")
    assert [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()][-1] == 3


@pytest.mark.parametrize("name", ["log.txt", "metrics.jsonl"])
def test_a_symlink_at_an_appended_file_is_never_followed(world, tmp_path, capsys, name):
    "A link at log.txt or metrics.jsonl: a failing resume's traceback and the new rows go to the run's own files; the link's target is untouched."
    run, users = tmp_path / "run", tmp_path / "users.jsonl"
    assert main(args(world, run, "--steps", "1", "--save-every", "1")) == 0
    (tmp_path / "boom.py").write_text("def says(prompts, completions, **kw): raise RuntimeError('a reward that fails')\n")
    shutil.copy(run / name if name == "metrics.jsonl" else world / "chat.jsonl", users); before = digest(users)
    (run / name).unlink(missing_ok=True); os.symlink(users, run / name)
    if name == "log.txt": assert main(args(world, run, "--steps", "2", "--resume", "--accept-changed", reward=tmp_path / "boom.py")) != 0   # logged
    else: assert main(args(world, run, "--steps", "2", "--resume")) == 0
    capsys.readouterr()
    assert digest(users) == before and not (run / name).is_symlink()
    if name == "log.txt": assert "a reward that fails" in (run / "log.txt").read_text()


def test_a_reward_that_changes_directory_moves_nothing(world, tmp_path, capsys, monkeypatch):
    "A reward that calls os.chdir: the run's files stay in its directory (paths resolved once, when the run opens), the user's files elsewhere untouched."
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere" / "model").mkdir(parents=True); (tmp_path / "elsewhere" / "model" / "my_weights_v1.bin").write_bytes(b"mine")
    (tmp_path / "chdir.py").write_text("import os\n"
        f"def says(prompts, completions, **kw): os.chdir({str(tmp_path / 'elsewhere')!r}); return [0.5] * len(completions)\n")
    before = digest(tmp_path / "elsewhere")
    assert main(args(world, "run", "--steps", "2", reward="chdir.py")) == 0
    capsys.readouterr()
    assert digest(tmp_path / "elsewhere") == before and sorted(os.listdir(tmp_path / "elsewhere")) == ["model"]
    assert [json.loads(l)["step"] for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["out_dir"] == str(tmp_path / "run") and cfg["reward"] == [f"{tmp_path / 'chdir.py'}:says"]   # recorded absolute


def test_a_cap_on_the_users_rows_is_said(world, tmp_path, capsys):
    "--n-train below the dataset's size trains on the first rows, with one line that says how many of how many and how to use them all."
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert main(args(world, tmp_path / "run", "--steps", "1", "--n-train", "4")) == 0
    capsys.readouterr()
    said = [str(x.message) for x in w if "training on the first 4 of its" in str(x.message)]
    assert len(said) == 1 and "--n-train" in said[0]
    with warnings.catch_warnings(record=True) as w:                   # without --n-train: all of the user's rows, no cap
        warnings.simplefilter("always")
        assert main(args(world, tmp_path / "all", "--steps", "1")) == 0
    assert not [x for x in w if "training on the first" in str(x.message)]
    assert json.loads((tmp_path / "all" / "config.json").read_text())["n_train"] is None


@pytest.mark.parametrize("pattern", ["eval-*.json", "*"])
def test_overwrite_ignores_an_old_markers_patterns(world, tmp_path, capsys, pattern):
    "A marker from another version listing eval-*.json (or *): --overwrite deletes only the names this code writes, never the user's files."
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "1")) == 0
    (run / "eval-final.json").write_text('{"mine": 1}'); (run / "notes.txt").write_text("mine")
    (run / "eval-0123456789ab.json").write_text("{}")                     # a cached evaluation: the run's own
    m = json.loads((run / ".rl_notes_run").read_text()); m["files"].append(pattern); (run / ".rl_notes_run").write_text(json.dumps(m))
    before = digest(run / "eval-final.json", run / "notes.txt")
    assert main(args(world, run, "--steps", "1", "--overwrite")) == 0
    capsys.readouterr()
    assert digest(run / "eval-final.json", run / "notes.txt") == before and not (run / "eval-0123456789ab.json").exists()


def test_a_monitoring_option_does_not_block_resume(world, tmp_path, capsys):
    "--doctor-every (the live doctor) is run control: a resume may turn it on, off or change it."
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "1", "--save-every", "1", "--doctor-every", "1")) == 0
    assert main(args(world, run, "--steps", "2", "--resume")) == 0
    capsys.readouterr()
    assert [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]


def test_resume_reexports_after_a_failed_export(world, tmp_path, capsys, monkeypatch):
    import rl_notes.trainer as tr
    from rl_notes.report import export_step
    run, real = tmp_path / "run", tr.export_model
    def fails_at_2(*a, **kw):
        if kw["step"] == 2: raise OSError(28, "No space left on device")
        return real(*a, **kw)
    monkeypatch.setattr(tr, "export_model", fails_at_2)
    one_line(capsys, main(args(world, run, "--save-every", "1")), 1, ERR, "No space left on device", "(at step 2)", "the last checkpoint (step 2)")
    assert export_step(run / "model") == 1
    monkeypatch.setattr(tr, "export_model", real)
    assert main(args(world, run, "--resume")) == 0
    assert f"model (Hugging Face format): {run / 'model'}" in capsys.readouterr().out and export_step(run / "model") == 2


def test_a_killed_export_swap_is_recovered(world, tmp_path, capsys):
    from rl_notes.report import export_step
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "1")) == 0
    os.rename(run / "model", run / "model.old"); (run / "model.tmp").mkdir(); (run / "model.tmp" / "config.json").write_text("{")   # killed mid-swap
    before = digest(run / "model.old")
    with pytest.warns(UserWarning, match="recovered .*model from model.old"):
        assert main(args(world, run, "--steps", "1", "--resume")) == 0
    assert {k.replace("model.old", "model"): v for k, v in before.items()} == digest(run / "model") and export_step(run / "model") == 1
    assert not (run / "model.tmp").exists() and not (run / "model.old").exists()
    capsys.readouterr()


def test_a_model_tmp_that_cannot_be_cleared_stops_the_run(world, tmp_path, capsys, monkeypatch):
    import rl_notes.report as rep
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "1")) == 0
    (run / "model.tmp").mkdir(); (run / "model.tmp" / "x").write_text("stuck")
    real = rep.shutil.rmtree
    def refuses(p, *a, **kw):
        if Path(p).name == "model.tmp": raise PermissionError(13, "Permission denied")
        return real(p, *a, **kw)
    monkeypatch.setattr(rep.shutil, "rmtree", refuses)
    before = digest(run / "model")
    one_line(capsys, main(args(world, run, "--resume")), 2, ERR, f"cannot clear {run / 'model.tmp'} before exporting the model (Permission denied)")
    assert digest(run / "model") == before


# (4) eval imports a run's code only when the user names it or trusts the run

def test_eval_imports_run_code_only_when_trusted(world, tmp_path, capsys):
    rew = tmp_path / "their_rewards.py"
    rew.write_text("open(__file__ + '.imported', 'w').close()\n" + REWARDS)   # the import itself leaves a trace
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "1", reward=rew) + ["--max-new-tokens", "4"]) == 0
    (tmp_path / "their_rewards.py.imported").unlink(); capsys.readouterr()
    before = digest(run, rew)
    one_line(capsys, main(["eval", str(run), "--n", "2"]), 2, ERR,
             f"the run's config.json names code that eval would import ({rew}:says); pass --trust-run-code")
    assert not (tmp_path / "their_rewards.py.imported").exists() and digest(run, rew) == before
    assert main(["eval", str(run), "--n", "2", "--trust-run-code"]) == 0
    out, err = capsys.readouterr()
    assert f"rl_notes eval: importing the run's code: {rew}:says" in err and json.loads(out)["reward"] >= 0
    assert (tmp_path / "their_rewards.py.imported").exists()
    (tmp_path / "their_rewards.py.imported").unlink()
    assert main(["eval", str(run), "--n", "2", "--reward", f"{world / 'rewards.py'}:says"]) == 0    # named by the user: no flag needed
    assert not (tmp_path / "their_rewards.py.imported").exists()
    capsys.readouterr()


def test_eval_of_a_moved_run_names_the_files_it_reads(world, tmp_path, capsys):
    "A run directory moved elsewhere: eval says where it was written and which recorded (absolute) dataset and reward files it reads; a recorded dataset that is gone is one line."
    data = tmp_path / "data.jsonl"; shutil.copy(world / "chat.jsonl", data)
    run, moved = tmp_path / "run", tmp_path / "elsewhere" / "run"
    assert main(args(world, run, "--steps", "1", dataset=data) + ["--max-new-tokens", "4"]) == 0
    moved.parent.mkdir(); run.rename(moved); capsys.readouterr()
    assert main(["eval", str(moved), "--n", "2", "--trust-run-code"]) == 0
    err = capsys.readouterr().err
    assert f"the run was written at {run}, now read at {moved}" in err and f"dataset {data}" in err and f"reward {world / 'rewards.py'}:says" in err
    data.unlink()
    one_line(capsys, main(["eval", str(moved), "--n", "2", "--trust-run-code"]), 2, ERR, f"the run's dataset {data} is not there", "pass --dataset FILE")


# (5) checks before the model loads and before any run directory is created

@pytest.mark.parametrize("extra, msg", [
    (["--n", "-1"], "--n must be >= 1 (test-split prompts to score), got -1"),
    (["--n", "0"], "--n must be >= 1 (test-split prompts to score), got 0"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
])
def test_eval_counts(world, capsys, extra, msg):
    one_line(capsys, main(["eval", "--model", str(world / "model"), *extra]), 2, ERR, msg)


def test_eval_binary_config_is_one_line(world, tmp_path, capsys):
    run = tmp_path / "run"; (run / "model").mkdir(parents=True); shutil.copy(world / "model" / "config.json", run / "model" / "config.json")
    (run / "metrics.jsonl").write_text(""); (run / "config.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    before = digest(run)
    one_line(capsys, main(["eval", str(run)]), 2, ERR, f"{run / 'config.json'}: not a run's config (not UTF-8 JSON")
    assert digest(run) == before


@pytest.mark.parametrize("extra, msg", [
    (["--vllm-importance-sampling-clip-min", "5", "--vllm-importance-sampling-clip-max", "2"],
     "Algo.tis_c_min (5, TRL's vllm_importance_sampling_clip_min) must be <= Algo.tis_c_max (2, vllm_importance_sampling_clip_max)"),
    (["--off-policy-mask-threshold", "-5"], "Algo.opsm_delta (TRL's off_policy_mask_threshold) must be >= 0 or None, got -5"),
    (["--sampler-lag", "1000000000000"], "TrainConfig.sampler_lag (1000000000000) must be <= steps (2)"),
])
def test_train_checks_before_anything_is_created(world, tmp_path, capsys, extra, msg):
    before = digest(world)
    one_line(capsys, main(args(world, tmp_path / "run", *extra)), 2, ERR, msg)
    assert not (tmp_path / "run").exists() and digest(world) == before


def test_out_inside_model_and_model_inside_out_are_refused(world, tmp_path, capsys):
    shutil.copytree(world / "model", model := tmp_path / "base"); before = digest(model)
    one_line(capsys, main(args(world, model / "run", model=model)), 2, ERR, f"TrainConfig.out_dir '{model / 'run'}' is inside the model directory")
    assert digest(model) == before and not (model / "run").exists()
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "1")) == 0
    before = digest(run / "model")
    one_line(capsys, main(args(world, run, "--overwrite", model=run / "model")), 2, ERR, "is this run's own model/ in out_dir, which the run replaces")
    assert digest(run / "model") == before


def test_sampler_dtype_none_is_accepted(world, tmp_path, capsys):
    assert main(args(world, tmp_path / "run", "--steps", "1", "--sampler-dtype", "none")) == 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["sampler_dtype"] is None
    capsys.readouterr()


def test_accept_changed_on_a_fresh_run_warns(world, tmp_path, capsys):
    with pytest.warns(UserWarning, match="--accept-changed.*starts fresh.*nothing to accept"):
        assert main(args(world, tmp_path / "run", "--steps", "1", "--accept-changed")) == 0
    capsys.readouterr()


def test_resume_names_only_the_changed_fields(world, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "1", "--algo", "grpo_tis")) == 0
    before = digest(run)
    line = one_line(capsys, main(args(world, run, "--resume", "--algo", "grpo_tis", "--vllm-importance-sampling-clip-max", "3")), 2, ERR,
                    "was written by a different configuration: algo.tis_c_max: checkpoint 2.0 != now 3")
    assert len(line) < 400 and "eps_low" not in line and digest(run) == before


def test_semicolon_csv_dataset_names_the_delimiter(world, tmp_path, capsys):
    f = tmp_path / "data.csv"; f.write_text("prompt;answer\n" + "".join(f"What is {i}+1?;{i + 1}\n" for i in range(16)))
    before = digest(f)
    one_line(capsys, main(args(world, tmp_path / "run", dataset=f)), 2, ERR, "the header 'prompt;answer' has no `prompt` column but holds ';'",
             "looks ';'-separated")
    assert digest(f) == before and not (tmp_path / "run").exists()


def test_prompt_formats_must_agree_across_splits(world, tmp_path, capsys):
    "String prompts to train on and chat prompts held out: refused in one line, before any weights load."
    from datasets import Dataset, DatasetDict
    d = tmp_path / "mixed"
    DatasetDict({"train": Dataset.from_list([{"prompt": f"What is {i}+1?", "answer": str(i + 1)} for i in range(8)]),
                 "test": Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i}+2?"}], "answer": str(i + 2)} for i in range(4)])}).save_to_disk(str(d))
    capsys.readouterr()                                                   # datasets' progress bars
    one_line(capsys, main(args(world, tmp_path / "run", dataset=d)), 2, ERR, "give both splits one format")


def test_changing_steps_on_resume_under_a_decaying_schedule_is_said(world, tmp_path, capsys):
    import warnings
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "2", "--save-every", "1", "--lr-scheduler-type", "linear", "--stop-at", "1")) == 0
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert main(args(world, run, "--steps", "6", "--resume", "--lr-scheduler-type", "linear")) == 0
    capsys.readouterr()
    said = [str(x.message) for x in w if "under the linear schedule" in str(x.message)]
    assert len(said) == 1 and "the checkpoint's run had 2" in said[0]


def test_resuming_a_finished_run_re_exports_a_damaged_model(world, tmp_path, capsys):
    "A finished run whose exported weights were damaged: resuming it checks them against the sha256 the export recorded and writes them again."
    from rl_notes.report import export_intact
    run = tmp_path / "run"
    assert main(args(world, run, "--steps", "2")) == 0
    w = run / "model" / "model.safetensors"; good = w.read_bytes(); w.write_bytes(good[: len(good) // 2])
    assert not export_intact(run / "model")
    assert main(args(world, run, "--steps", "2", "--resume")) == 0
    capsys.readouterr()
    assert export_intact(run / "model") and w.read_bytes() == good
