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
