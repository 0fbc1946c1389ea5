"Data parallel under accelerate: 2 CPU processes give the loss and metrics of 1 process for the same global batch."
import json, os, shutil, subprocess, sys
from pathlib import Path
import pytest

BIN = Path(sys.executable).parent
ACC = BIN / "accelerate"

def micro_model(d):
    from rl_notes.models import sft_warm_start
    return str(sft_warm_start("addition", model_cfg=dict(hidden_size=32, num_layers=1, heads=2), steps=60, batch_size=32,
                              eval_n=0, n_train=2000, cache_dir=d, progress=False, max_digits=2, scratchpad=False))

@pytest.mark.skipif(not ACC.exists(), reason="accelerate CLI not installed")
def test_two_processes_match_one(tmp_path):
    model = micro_model(tmp_path / "cache")
    code = "import sys; from rl_notes.cli import main; sys.exit(main())"
    script = tmp_path / "rl_notes_main.py"; script.write_text(code)
    args = ["train", "--model", model, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false", "--algo", "dapo",
            "--set", "overlong_cache=2", "--set", "max_gen_rounds=2", "--steps", "3", "--n-prompts", "4", "--group-size", "4",
            "--max-new-tokens", "3", "--n-eval", "8", "--eval-every", "3", "--n-train", "200", "--no-shard", "--quiet", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    one = subprocess.run([sys.executable, str(script), *args, "--out", str(tmp_path / "one")], capture_output=True, text=True, env=env, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([str(ACC), "launch", "--cpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                          "--dynamo_backend", "no", str(script), *args, "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    rows = lambda d: [json.loads(l) for l in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
    r1, r2 = rows("one"), rows("two")
    assert [r["step"] for r in r1] == [r["step"] for r in r2] == [0, 1, 2, 3]
    checked = 0
    for a, b in zip(r1, r2):
        for k, v in a.items():
            if k.startswith("time") or k == "heldout_sample_acc" or not isinstance(v, float): continue  # sampled eval: per-process seeds
            assert b[k] == pytest.approx(v, rel=1e-4, abs=1e-6), (a["step"], k, v, b[k])
            checked += 1
    assert any(abs(r.get("loss") or 0) > 0 for r in r1) and any((r.get("grad_norm") or 0) > 0 for r in r1)
    assert checked > 40
