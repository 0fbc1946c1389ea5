"""Runs whose samples degenerate, for the doctor's `degenerate` check (`42_doctor`): into empty answers in rl_notes' trainer
and in TRL's GRPOTrainer (with `log_completions=True`), each on the micro addition model with a reward that pays for
brevity; and into loops in rl_notes' trainer, with a reward that pays for length and a sampling temperature of 0.3.

    python nbs/examples/degenerate_runs.py OUT_DIR     # about a minute on one CPU core

writes OUT_DIR/rl_notes-brevity/ and OUT_DIR/rl_notes-verbosity/ (metrics.jsonl, config.json) and OUT_DIR/trl-brevity/
(trainer_state.json, completions/completions_<step>.parquet)."""
import sys, json, shutil
from pathlib import Path

def brevity(completions, **kw):
    "Pays for short answers: 1 for an empty one, 0 from 8 characters on."
    return [1.0 - min(len(c if isinstance(c, str) else c[-1]["content"]), 8) / 8 for c in completions]

def verbosity(completions, **kw):
    "Pays for long answers: the share of a 24-character budget used."
    return [min(len(c), 24) / 24 for c in completions]

def main(out:Path):
    import torch
    torch.set_num_threads(1)
    from rl_notes.lab import sft_warm_start
    from rl_notes.sft import SFTConfig
    from rl_notes.trainer import TrainConfig, train
    from rl_notes.tasks import get_task
    out.mkdir(parents=True, exist_ok=True)
    task_kw = dict(max_digits=2, scratchpad=False)
    micro = sft_warm_start("addition", SFTConfig(model_cfg=dict(hidden_size=32, num_layers=1, heads=2), steps=60, batch_size=32, eval_n=0,
                                                  n_train=2000), cache_dir=out / "sft", progress=False, **task_kw)
    (out / "rewards.py").write_text(Path(__file__).read_text())          # the reward file the rl_notes run names
    cfg = TrainConfig(model=str(micro), task="addition", task_kw=task_kw, algo="grpo", steps=30, n_prompts=8, group_size=8, max_new_tokens=8,
                      n_train=500, n_eval=0, progress=False, lr=3e-3, seed=0, reward=[f"{out / 'rewards.py'}:brevity"],
                      out_dir=str(out / "rl_notes-brevity"), overwrite=True)
    train(cfg)
    train(TrainConfig(model=str(micro), task="addition", task_kw=task_kw, algo="grpo", steps=40, n_prompts=8, group_size=8, max_new_tokens=24,
                      n_train=500, n_eval=0, progress=False, lr=1e-2, seed=0, temperature=0.3, reward=[f"{out / 'rewards.py'}:verbosity"],
                      out_dir=str(out / "rl_notes-verbosity"), overwrite=True))
    from transformers.utils import logging as hf_logging; hf_logging.set_verbosity_error()
    from trl import GRPOConfig, GRPOTrainer
    ds = get_task("addition", **task_kw).dataset(8 * 30, seed=0, split="train").select_columns(["prompt"])
    d = out / "trl-brevity"
    if d.exists(): shutil.rmtree(d)
    args = GRPOConfig(output_dir=str(d), num_generations=8, per_device_train_batch_size=8, max_completion_length=8, learning_rate=3e-3,
                      max_steps=30, logging_steps=1, log_completions=True, num_completions_to_print=0, report_to="none", use_cpu=True, save_strategy="no",
                      disable_tqdm=True, dataloader_num_workers=0, bf16=False, seed=0, beta=0.0)
    tr = GRPOTrainer(model=str(micro), reward_funcs=brevity, args=args, train_dataset=ds)
    tr.train(); tr.state.save_to_json(str(d / "trainer_state.json"))

if __name__ == "__main__": main(Path(sys.argv[1]))
