"Data parallel under accelerate: 2 CPU processes give the loss and metrics of 1 process for the same global batch."
import json, os, shutil, subprocess, sys
from pathlib import Path
import pytest

BIN = Path(sys.executable).parent
ACC = BIN / "accelerate"
TORCHRUN = BIN / "torchrun"
pytestmark = pytest.mark.torchrun                  # every test here launches two processes with torchrun

def _free_port():
    import socket
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed")
# ppo: the critic's value loss also uses the global token count; 80/20: the entropy quantile over both processes' tokens;
# entropy: the entropy bonus's token count and the adaptive coefficient's entropy over both processes, on the 80/20 tokens
@pytest.mark.parametrize("algo", ["dapo", "ppo", "80/20", "entropy"])
def test_two_processes_match_one(tmp_path, algo, micro_sft):
    model = micro_sft
    code = "import sys; from rl_notes.cli import main; sys.exit(main())"
    script = tmp_path / "rl_notes_main.py"; script.write_text(code)
    sets = {"dapo": ["--set", "cache_len=2", "--set", "max_rounds=2"], "80/20": ["--set", "top_entropy_quantile=0.2", "--set", "beta=0"],
            "entropy": ["--set", "top_entropy_quantile=0.5", "--set", "beta=0", "--use-adaptive-entropy", "--entropy-target", "10",
                        "--entropy-coef-delta", "0.05"]}
    args = ["train", "--model", model, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false", "--algo", "grpo" if algo in ("80/20", "entropy") else algo,
            *sets.get(algo, []), "--steps", "3", "--n-prompts", "4", "--group-size", "4",
            "--max-new-tokens", "3" if algo == "dapo" else "5", "--n-eval", "8", "--eval-every", "3", "--n-train", "200", "--no-shard", "--quiet", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    one = subprocess.run([sys.executable, str(script), *args, "--out", str(tmp_path / "one")], capture_output=True, text=True, env=env, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    # two real processes on the CPU (gloo): `accelerate launch --cpu --num_processes 2` starts ONE process (accelerate
    # launches multi-CPU jobs through mpirun only), so the test uses torchrun, and ACCELERATE_USE_CPU makes the
    # Accelerator join the process group on the CPU; the assert below checks that two processes really ran
    two = subprocess.run([str(TORCHRUN), "--nproc_per_node", "2", "--master_port", str(_free_port()), str(script), *args, "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, env={**env, "ACCELERATE_USE_CPU": "true"}, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    state = lambda d: json.loads((tmp_path / d / "ckpt" / "state.json").read_text())
    assert state("one")["world_size"] == 1 and state("two")["world_size"] == 2      # really two processes
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
    if algo == "entropy": assert any(r.get("entropy_bonus", 0) < 0 for r in r1) and len({r.get("entropy_coef") for r in r1[1:]}) > 1

@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed")
def test_sharded_two_processes_train(tmp_path, micro_sft):
    "Sharded rollouts (each process samples its own prompts): whitening, explained variance and token counts reduce over both."
    model = micro_sft
    script = tmp_path / "rl_notes_main.py"; script.write_text("import sys; from rl_notes.cli import main; sys.exit(main())")
    args = ["train", "--model", model, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false", "--algo", "ppo", "--steps", "2",
            "--n-prompts", "4", "--group-size", "4", "--max-new-tokens", "5", "--n-eval", "8", "--n-train", "200", "--ppo-epochs", "2",
            "--n-minibatches", "2", "--quiet", "--threads", "1", "--out", str(tmp_path / "two")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "ACCELERATE_USE_CPU": "true"}
    two = subprocess.run([str(TORCHRUN), "--nproc_per_node", "2", "--master_port", str(_free_port()), str(script), *args],
                         capture_output=True, text=True, env=env, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    assert json.loads((tmp_path / "two" / "ckpt" / "state.json").read_text())["world_size"] == 2
    rows = [json.loads(l) for l in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows[1:]:
        for k in ("loss", "grad_norm", "value_loss", "adv_abs"): assert isinstance(r[k], float) and r[k] == r[k], (k, r)

REDUCE = '''
import sys, torch
from pathlib import Path
from accelerate import Accelerator
from rl_notes.core import masked_whiten
from rl_notes.ppo import explained_variance
acc = Accelerator()
assert acc.num_processes == 2, acc.num_processes
reduce = lambda t: acc.reduce(t, "sum")                                   # what the trainer passes as `reduce`
g = torch.Generator().manual_seed(0)
x, v, m = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g), torch.rand(6, 5, generator=g) > 0.3
r = acc.process_index; mine = slice(3 * r, 3 * r + 3)                     # each process holds only its own rows
whole = masked_whiten(x, m)
assert torch.allclose(masked_whiten(x[mine], m[mine], reduce=reduce), whole[mine], atol=1e-6)
assert not torch.allclose(masked_whiten(x[mine], m[mine]), whole[mine], atol=1e-3)   # local statistics differ
ev = explained_variance(v[mine], x[mine], m[mine], reduce=reduce).item()
assert abs(ev - explained_variance(v, x, m).item()) < 1e-6, ev
Path(sys.argv[1], f"ok{r}").write_text("ok")                              # one marker per process (stdout interleaves)
acc.wait_for_everyone()
acc.end_training()                     # destroy the gloo group before exit (left alive it can abort the interpreter)
'''

@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed")
def test_reduce_hooks_across_processes(tmp_path):
    "Sharded rollouts: whitening and explained variance over both processes' rows (the `reduce` hook the trainer passes, on accelerate)."
    script = tmp_path / "reduce.py"; script.write_text(REDUCE)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    r = subprocess.run([str(TORCHRUN), "--nproc_per_node", "2", "--master_port", str(_free_port()), str(script), str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "ok0").is_file() and (tmp_path / "ok1").is_file(), (r.stdout, r.stderr[-2000:])
