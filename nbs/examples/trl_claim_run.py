"""One run of the KL-Cov-against-clip comparison through TRL's GRPOTrainer (`63_claims_through_trl`): the lab's countdown
SFT start, TRL 1.16's trainer with `rl_notes.trl_trainer` (loss_type "dapo", TRL's clip, or "kl_cov", rl_notes' KL-Cov),
the lab's batch arithmetic (64 prompts x 8 completions per batch, 64 optimizer steps per batch), on the CPU.

    python nbs/examples/trl_claim_run.py --loss kl_cov --seed 0 --out DIR      # writes DIR/trainer_state.json

Everything but --loss, --seed and --batches is fixed here, so a run's output directory is named by those alone."""
import argparse, json, os, time


CD_TASK = dict(n_numbers=4, max_number=9, max_target=99)         # the lab's countdown task (57_estimators, D1)
CD_SFT = dict(steps=3000, n_train=20000, seed=0, target_accuracy=0.25)   # its SFT start
BATCH = dict(per_device_train_batch_size=32, steps_per_generation=16, num_iterations=4, num_generations=8,
             max_completion_length=12, learning_rate=3e-4, lr_scheduler_type="constant", beta=0.0, temperature=1.0)
STEPS_PER_BATCH = BATCH["steps_per_generation"] * BATCH["num_iterations"]   # 64 optimizer steps on each batch of 512 completions


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loss", choices=["dapo", "kl_cov"], required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--batches", type=int, default=60, help="generation batches (each 64 optimizer steps)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import torch; torch.set_num_threads(1)
    from transformers.utils import logging; logging.set_verbosity_error()
    from datasets import Dataset
    from rl_notes.lab import sft_warm_start
    from rl_notes.sft import SFTConfig
    from rl_notes.tasks import get_task, TaskReward
    from rl_notes.trl_trainer import GRPOConfig, GRPOTrainer
    sft = sft_warm_start("countdown", SFTConfig(**CD_SFT), progress=False, **CD_TASK)
    task = get_task("countdown", **CD_TASK)
    train_rows, _ = task.splits(20000, 10, seed=0)
    extra = dict(kl_cov_ratio=0.01) if a.loss == "kl_cov" else {}   # the lab's KL-Cov arm: 1% of the tokens penalised
    cfg = GRPOConfig(output_dir=a.out, use_cpu=True, bf16=False, report_to="none", save_strategy="no", seed=a.seed, disable_tqdm=True,
                     logging_steps=16, dataloader_num_workers=0, loss_type=a.loss, max_steps=a.batches * STEPS_PER_BATCH, **BATCH, **extra)
    t0 = time.time()
    trainer = GRPOTrainer(model=str(sft), reward_funcs=TaskReward(task), args=cfg, train_dataset=Dataset.from_list(train_rows.to_list()))
    trainer.train()
    trainer.state.save_to_json(os.path.join(a.out, "trainer_state.json.tmp"))
    os.replace(os.path.join(a.out, "trainer_state.json.tmp"), os.path.join(a.out, "trainer_state.json"))   # last: marks a finished run
    print(json.dumps({"loss": a.loss, "seed": a.seed, "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
