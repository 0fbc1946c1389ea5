"""rl_notes.trl_trainer against TRL's own GRPOTrainer on CPU: with no rl_notes option the weights after 2 steps are TRL's; with an
estimator the advantages are rl_notes' function of TRL's rewards; doctor_every attaches the doctor."""
import os, subprocess, sys
from pathlib import Path
import pytest
from conftest import trl_grpo_script

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.mark.slow   # one subprocess: three tiny 2-step TRL runs
def test_drop_in_trainer(tmp_path):
    pytest.importorskip("trl")
    code = trl_grpo_script(tmp_path, max_steps=2, beta=0.0) + """
import dataclasses
from rl_notes import trl_trainer as rt
from rl_notes.family import rloo_advantages
from rl_notes.doctor import DoctorCallback
def weights(tr): return {k: v.detach().clone() for k, v in tr.model.state_dict().items()}
base = {k: getattr(cfg, k) for k in ("per_device_train_batch_size", "num_generations", "max_completion_length", "learning_rate", "beta", "max_steps",
                                    "logging_steps", "report_to", "use_cpu", "save_strategy", "seed", "disable_tqdm", "dataloader_num_workers")}
runs = {}
for name, C, T, extra in (("trl", GRPOConfig, GRPOTrainer, {}), ("ours", rt.GRPOConfig, rt.GRPOTrainer, {})):
    c = C(output_dir=cfg.output_dir + name, **base, **extra)
    tr = T(model=md, reward_funcs=digits, args=c, train_dataset=ds, processing_class=tok); tr.train(); runs[name] = weights(tr)
diff = max((runs["trl"][k] - runs["ours"][k]).abs().max().item() for k in runs["trl"])
moved = max((runs["trl"][k] - weights(T(model=md, reward_funcs=digits, args=C(output_dir=cfg.output_dir + "x", **base), train_dataset=ds, processing_class=tok))[k]).abs().max().item() for k in runs["trl"])
print("SAME_AS_TRL", diff, moved)
seen = []
class Spy(rt.GRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        r = (self._rl_notes_rpf * self.reward_weights.unsqueeze(0)).nansum(1)
        seen.append((out["advantages"] - rloo_advantages(r.float(), self.num_generations)[:len(out["advantages"])]).abs().max().item())
        return out
c = rt.GRPOConfig(output_dir=cfg.output_dir + "rloo", **base, advantage_estimator="rloo", doctor_every=1)
tr = Spy(model=md, reward_funcs=digits, args=c, train_dataset=ds, processing_class=tok); tr.train()
print("RLOO", max(seen), len(seen), any(isinstance(cb, DoctorCallback) for cb in tr.callback_handler.callbacks))
for loss in ("kl_cov", "flash_reinforce"):                        # rl_notes' losses TRL lacks, with an rl_notes estimator
    c = rt.GRPOConfig(output_dir=cfg.output_dir + loss, **{**base, "beta": 0.0}, loss_type=loss, advantage_estimator="rloo", kl_cov_ratio=0.2,
                      gate="icepop")                                # the issue's three together (the gate is a no-op without vLLM)
    tr = rt.GRPOTrainer(model=md, reward_funcs=digits, args=c, train_dataset=ds, processing_class=tok); w0 = weights(tr); tr.train()
    logged = sorted({k for row in tr.state.log_history for k in row if k.startswith("rl_notes/")})
    print("LOSS", loss, max((weights(tr)[k] - w0[k]).abs().max().item() for k in w0), ",".join(logged) or "-")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    same = next(l for l in p.stdout.splitlines() if l.startswith("SAME_AS_TRL")).split()
    assert float(same[1]) == 0.0 and float(same[2]) > 0, same          # identical to TRL's run, and the run did move the weights
    rloo = next(l for l in p.stdout.splitlines() if l.startswith("RLOO")).split()
    assert float(rloo[1]) < 1e-6 and int(rloo[2]) >= 1 and rloo[3] == "True", rloo
    losses = [l.split() for l in p.stdout.splitlines() if l.startswith("LOSS")]
    assert [l[1] for l in losses] == ["kl_cov", "flash_reinforce"] and all(float(l[2]) > 0 for l in losses), losses   # each trained


@pytest.mark.torchrun   # two processes (torchrun, gloo on the CPU)
def test_two_processes_train_through_trl(tmp_path):
    "Under torchrun with 2 CPU processes, the drop-in trainer trains with rl_notes' estimator, loss and doctor (TRL's DDP path); the rewards the estimator reads are gathered from both."
    pytest.importorskip("trl")
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists(): pytest.skip("torchrun not installed")
    import socket
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    code = trl_grpo_script(tmp_path, max_steps=2, beta=0.0, per_device_train_batch_size=4) + """
import torch.distributed as dist
from rl_notes import trl_trainer as rt
class Spy(rt.GRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        with open(f"{cfg.output_dir}-rows{self.accelerator.process_index}.txt", "a") as f:   # one file per process: no interleaved lines
            f.write(f"ROWS {self.accelerator.process_index} {self.accelerator.num_processes} {self._rl_notes_rpf.shape[0]} {out['advantages'].shape[0]}\\n")
        return out
c = rt.GRPOConfig(output_dir=cfg.output_dir, **{k: getattr(cfg, k) for k in ("per_device_train_batch_size", "num_generations", "max_completion_length",
                  "learning_rate", "beta", "max_steps", "logging_steps", "report_to", "use_cpu", "save_strategy", "seed", "disable_tqdm", "dataloader_num_workers")},
                  advantage_estimator="rloo", loss_type="kl_cov", kl_cov_ratio=0.2, doctor_every=1)
tr = Spy(model=md, reward_funcs=digits, args=c, train_dataset=ds, processing_class=tok); tr.train()
open(f"{cfg.output_dir}-done{tr.accelerator.process_index}.txt", "w").write(str(tr.state.global_step))   # a file per process: no interleaving
"""
    script = tmp_path / "two.py"; script.write_text(code)
    p = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--master_port", str(port), str(script)], capture_output=True, text=True,
                       env={**ENV, "ACCELERATE_USE_CPU": "true"}, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [l.split() for r in (0, 1) for l in (tmp_path / f"run-rows{r}.txt").read_text().splitlines()]
    assert {r[1] for r in rows} == {"0", "1"} and all(r[2] == "2" and int(r[3]) == 2 * int(r[4]) for r in rows), rows   # global rewards, local rows
    assert sum(r[1] == "1" for r in rows) >= 2, rows
    assert [(tmp_path / f"run-done{r}.txt").read_text() for r in (0, 1)] == ["2", "2"]      # both processes took both steps


@pytest.mark.slow
def test_the_worked_example_runs(tmp_path):
    "nbs/examples/grpo_with_rl_notes.py, the TRL script with one import changed, trains a tiny local model for 2 steps on the CPU."
    pytest.importorskip("trl")
    import json
    from rl_notes.models import save_tiny_chat_model
    model = save_tiny_chat_model(tmp_path / "model", vocab_size=300, hidden_size=32, num_layers=1)
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"What is {i}+1?"}], "answer": str(i + 1)}) + "\n"
                                              for i in range(16)))
    code = (f"import sys; sys.argv = ['x', '--model', {str(model)!r}, '--dataset', {str(tmp_path / 'p.jsonl')!r}, '--out', {str(tmp_path / 'run')!r}, "
            f"'--max-steps', '2', '--cpu']; import runpy; runpy.run_path({str(ROOT / 'nbs' / 'examples' / 'grpo_with_rl_notes.py')!r}, run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
