"The `rl_notes` console script, through a subprocess: help, one-line errors with exit status 2, a quick demo."
import json, os, subprocess, sys
from pathlib import Path
import pytest

BIN = Path(sys.executable).parent / "rl_notes"
CMD = [str(BIN)] if BIN.exists() else [sys.executable, "-c", "import sys; from rl_notes.cli import main; sys.exit(main())"]

def run(*args, timeout=300):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    return subprocess.run(CMD + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)

def test_help():
    r = run("--help")
    assert r.returncode == 0
    for cmd in ("sft", "train", "eval", "plot", "demo"): assert cmd in r.stdout
    r = run("train", "--help")
    assert r.returncode == 0 and "--algo" in r.stdout and "dapo" in r.stdout and "--task-arg" in r.stdout

@pytest.mark.parametrize("args,msg", [
    (("train", "--algo", "reinforce", "--model", "."), "invalid choice: 'reinforce'"),
    (("train", "--task", "sorting", "--model", "."), "unknown task 'sorting'"),
    (("train", "--model", "/no/such/model"), "--model '/no/such/model': no such directory"),
    (("eval", "--model", "/no/such/model"), "no such directory"),
    (("train",), "the following arguments are required: --model"),
    (("train", "--model", ".", "--steps", "ten"), "argument --steps: invalid int value: 'ten'"),
    (("train", "--model", ".", "--set", "clip=0.3"), "unknown Algo field"),
    (("train", "--model", ".", "--task-arg", "digits=3"), "bad arguments for task 'addition'"),
    (("train", "--model", ".", "--algo", "grpo", "--critic-init", "rm"), "TrainConfig.critic_init is set ('rm') but algo 'grpo' has no critic"),
    (("plot", "/no/such/run"), "no metrics.jsonl"),
    (("frobnicate",), "invalid choice: 'frobnicate'"),
])
def test_errors_are_one_line(args, msg):
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("rl_notes: error:"), r.stderr
    assert msg in lines[0], lines[0]

def test_quick_demo_sft_train_eval_plot(tmp_path):
    r = run("demo", "--quick", "--quiet", "--out", tmp_path / "demo", "--cache-dir", tmp_path / "cache", "--threads", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    for f in ("grpo/metrics.jsonl", "dapo/metrics.jsonl", "curves.png", "summary.md"): assert (tmp_path / "demo" / f).is_file(), f
    assert "| grpo |" in (tmp_path / "demo" / "summary.md").read_text()
    # sft is cached: the same command prints the demo's checkpoint directory again at once
    r = run("sft", "--task-arg", "max_digits=4", "--task-arg", "scratchpad=true", "--steps", "30", "--n-train", "20000", "--cache-dir", tmp_path / "cache")
    assert r.returncode == 0, r.stderr[-2000:]
    model = r.stdout.strip().splitlines()[-1]
    assert Path(model).is_dir()
    r = run("train", "--algo", "dr_grpo", "--model", model, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false",
            "--steps", "2", "--n-prompts", "2", "--group-size", "2", "--max-new-tokens", "4", "--n-eval", "4", "--n-train", "200", "--quiet",
            "--out", tmp_path / "run", "--set", "eps_high=0.3")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["algo"]["eps_high"] == 0.3
    r = run("eval", "--model", model, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false", "--n", "8")
    assert r.returncode == 0 and 0 <= json.loads(r.stdout.strip().splitlines()[-1])["accuracy"] <= 1
    r = run("plot", tmp_path / "run", tmp_path / "demo" / "grpo", "--out", tmp_path / "p.png")
    assert r.returncode == 0 and (tmp_path / "p.png").is_file()
