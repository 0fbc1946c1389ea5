"""The live doctor: `DoctorCallback` in a real TRL GRPOTrainer run on CPU that blows up (a huge learning rate) and is stopped."""
import json, os, subprocess, sys
from pathlib import Path
import pytest
from conftest import trl_grpo_script

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.mark.slow   # about 40 s on a busy 2-core CPU, mostly importing trl/transformers in the subprocess
def test_doctor_callback_stops_a_blowing_up_trl_run(tmp_path):
    pytest.importorskip("trl")
    code = trl_grpo_script(tmp_path, learning_rate=1e6, max_grad_norm=1e9, max_steps=30) + """
from rl_notes.doctor import DoctorCallback
cb = DoctorCallback(every=1, stop=True)
tr = GRPOTrainer(model=md, reward_funcs=digits, args=cfg, train_dataset=ds, processing_class=tok, callbacks=[cb])
tr.train()
print("STOPPED_AT", tr.state.global_step, sorted({f.key for f in cb.findings if f.status == "present"}))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(l for l in p.stdout.splitlines() if l.startswith("STOPPED_AT"))
    step = int(line.split()[1])
    assert step < 30 and "rl_notes doctor: stopping the run at step" in p.stdout, p.stdout[-2000:]
    found = [json.loads(l) for l in (tmp_path / "run" / "doctor_findings.jsonl").read_text().splitlines()]
    assert any(f["status"] == "present" for f in found) and found[-1]["step"] <= step


# ---- the live doctor in rl_notes' own trainer: TrainConfig.doctor_every / doctor_stop (rl_notes train --doctor-every N --doctor-stop)

MICRO = dict(task_kw=dict(max_digits=2, scratchpad=False), n_prompts=4, max_new_tokens=6, n_train=200, n_eval=8, eval_every=2,
             progress=False, threads=1)


def _findings(d:Path) -> list:
    f = d / "doctor_findings.jsonl"
    return [json.loads(l) for l in f.read_text().splitlines()] if f.is_file() else []


def test_live_doctor_stops_a_blowing_up_run_with_its_checkpoint(tmp_path, micro_sft):
    "lr 0.3 wrecks the micro policy in one update: the doctor (every 2 steps) finds it present and the run ends there, with its checkpoint."
    from rl_notes.trainconfig import TrainConfig
    from rl_notes.trainer import train
    from rl_notes.doctor import live_doctor
    cfg = TrainConfig(model=micro_sft, algo="grpo", group_size=4, lr=0.3, steps=12, doctor_every=2, doctor_stop=True,
                      out_dir=str(tmp_path / "run"), overwrite=True, **MICRO)
    for _ in range(2): rows = train(cfg, doctor=live_doctor(cfg))   # the second run replaces the first one's files, its findings too
    last = rows[-1]["step"]
    found = _findings(tmp_path / "run")
    assert last < 12 and last % 2 == 0 and found and all(f["step"] <= last for f in found)
    assert any(f["status"] == "present" and f["step"] == last for f in found)
    assert json.loads((tmp_path / "run" / "ckpt" / "state.json").read_text())["step"] == last   # resumable from where it stopped
    assert [json.loads(l)["step"] for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1] == last


def test_live_doctor_lets_a_healthy_run_finish(tmp_path, micro_sft):
    "A small learning rate and a reward that differs within each group: nothing present, so the run goes to its last step."
    from rl_notes.trainconfig import TrainConfig
    from rl_notes.trainer import train
    from rl_notes.doctor import live_doctor
    (tmp_path / "r.py").write_text("def digit_sum(prompts, completions, **kw):\n"
                                   "    return [sum(int(ch) for ch in c if ch.isdigit()) / 20 for c in completions]\n")
    cfg = TrainConfig(model=micro_sft, algo="grpo", group_size=8, lr=1e-4, steps=12, doctor_every=2, doctor_stop=True,
                      reward=[f"{tmp_path / 'r.py'}:digit_sum"], out_dir=str(tmp_path / "run"), **MICRO)
    rows = train(cfg, doctor=live_doctor(cfg))
    assert rows[-1]["step"] == 12 and (tmp_path / "run" / "model").is_dir()
    assert not [f for f in _findings(tmp_path / "run") if f["status"] == "present"]


def test_doctor_every_needs_the_doctor_and_the_command_line_passes_it(tmp_path, micro_sft, capsys):
    from rl_notes.trainconfig import TrainConfig
    from rl_notes.trainer import train
    from rl_notes.cli import main
    cfg = TrainConfig(model=micro_sft, algo="grpo", group_size=4, steps=2, doctor_every=1, out_dir=str(tmp_path / "a"), **MICRO)
    with pytest.raises(ValueError, match="TrainConfig.doctor_every needs the doctor"): train(cfg)
    assert not (tmp_path / "a" / "metrics.jsonl").exists()                   # refused before the run directory is opened
    with pytest.raises(ValueError, match="doctor_stop needs doctor_every"): TrainConfig(model=micro_sft, doctor_stop=True)
    code = main(["train", "--model", micro_sft, "--algo", "grpo", "--lr", "0.3", "--steps", "12", "--group-size", "4", "--n-prompts", "4",
                 "--max-new-tokens", "6", "--n-eval", "8", "--eval-every", "2", "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false", "--n-train", "200",
                 "--doctor-every", "2", "--doctor-stop", "--out", str(tmp_path / "b"), "--quiet", "--threads", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "rl_notes doctor: stopping the run at step" in out, out[-2000:]
    assert any(f["status"] == "present" for f in _findings(tmp_path / "b"))
