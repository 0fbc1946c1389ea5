"""A TRL GRPO script with rl_notes inside TRL's trainer: the one line that changes is the import.

    python nbs/examples/grpo_with_rl_notes.py --model Qwen/Qwen2.5-0.5B-Instruct --dataset prompts.jsonl --out runs/trl-rloo
    accelerate launch --num_processes 8 nbs/examples/grpo_with_rl_notes.py ...      # TRL's DDP / DeepSpeed / FSDP path, unchanged

The prompts file holds one JSON object per line with a "prompt" (a string or chat messages) and an "answer" column; the
reward below is 1 when the completion contains the answer. rl_notes adds the RLOO estimator, the KL-Cov loss and the live
doctor by name; everything else is TRL's GRPOConfig."""
import argparse
from datasets import load_dataset
# from trl import GRPOConfig, GRPOTrainer          # TRL's own trainer
from rl_notes.trl_trainer import GRPOConfig, GRPOTrainer   # the same, with rl_notes' choices by name


def contains_answer(prompts, completions, answer, **kw):
    "1.0 when the completion's text contains the row's answer (TRL's reward signature)."
    text = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [float(str(a) in t) for t, a in zip(text, answer)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a model directory or hub id")
    ap.add_argument("--dataset", required=True, help="a JSON lines file of prompts with an answer column")
    ap.add_argument("--out", default="runs/trl-rloo")
    ap.add_argument("--max-steps", type=int, default=100)
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (tests, laptops)")
    a = ap.parse_args(argv)
    small = {"use_cpu": True, "bf16": False, "max_completion_length": 8} if a.cpu else {"max_completion_length": 256}
    args = GRPOConfig(output_dir=a.out, max_steps=a.max_steps, num_generations=8, per_device_train_batch_size=8, learning_rate=1e-6,
                      logging_steps=1, report_to="none", save_strategy="no",
                      advantage_estimator="rloo", loss_type="kl_cov", doctor_every=5,             # rl_notes' choices, by name
                      **small)
    trainer = GRPOTrainer(model=a.model, reward_funcs=contains_answer, args=args,
                          train_dataset=load_dataset("json", data_files=a.dataset, split="train"))
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
