"""Small logs in the formats of four engines, their metric names restated from each engine's source (the version named
beside each), for the doctor's readers (`41_runlogs`, tests/test_doctor.py). The values are synthetic and the same
for all four: 40 steps in which the policy's entropy collapses (0.8 -> 0.1 nats per token) while the reward rises.

    python nbs/examples/engine_logs/make.py      # rewrites the files beside this script"""
import json, math
from pathlib import Path

HERE = Path(__file__).resolve().parent
N = 40

def run(i:int) -> dict:
    "The synthetic run's values at step i (1-based)."
    t = (i - 1) / (N - 1)
    return dict(reward=0.2 + 0.5 * t, reward_std=0.45 - 0.2 * t, entropy=0.8 * math.exp(-t * math.log(8)), clip=0.002 + 0.01 * t,
                ppo_kl=0.0004 + 0.001 * t, kl=0.001 + 0.004 * t, length=800.0 - 200 * t, trunc=0.02, loss=-0.01, grad=0.3 + 0.05 * math.sin(i),
                lr=1e-6, mismatch=0.001, is_ratio=0.999, heldout=0.3 + 0.3 * t)

def write_jsonl(path:Path, rows:list):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

def openrlhf():
    "OpenRLHF 0.11: its W&B logger writes each key as train/<key> with train/global_step (utils/logging_utils.py)."
    rows = []
    for i in range(1, N + 1):
        v = run(i)
        rows.append({"_step": i, "train/global_step": i, "train/rollout/reward_mean": v["reward"], "train/rollout/reward_std": v["reward_std"],
                     "train/entropy_loss": v["entropy"], "train/ppo_clip_ratio": v["clip"], "train/ppo_kl": v["ppo_kl"], "train/kl": v["kl"],
                     "train/rollout/response_length_mean": v["length"], "train/rollout/truncated_rate": v["trunc"], "train/policy_loss": v["loss"],
                     "train/actor_grad_norm": v["grad"], "train/actor_lr": v["lr"], "train/vllm_kl": v["mismatch"], "train/reward": v["reward"],
                     "train/response_length": v["length"], "train/timing/step_total": 140.0})
        if i % 10 == 0: rows.append({"_step": i, "train/global_step": i, "eval/eval_math_pass1": v["heldout"], "eval/eval_response_length_mean": v["length"]})
    write_jsonl(HERE / "openrlhf" / "files" / "wandb-history.jsonl", rows)

def skyrl():
    "SkyRL (skyrl-train): wandb.log(payload, step=global_step), keys as the trainer and workers build them."
    rows = []
    for i in range(1, N + 1):
        v = run(i)
        rows.append({"_step": i, "trainer/global_step": i, "reward/avg_raw_reward": v["reward"], "reward/avg_pass_at_8": min(1.0, v["reward"] + 0.2),
                     "policy/policy_entropy": v["entropy"], "policy/loss_metrics/clip_ratio": v["clip"], "policy/policy_kl": v["kl"],
                     "generate/avg_num_tokens": v["length"], "policy/policy_loss": v["loss"], "policy/grad_norm": v["grad"], "policy/policy_lr": v["lr"],
                     "policy/rollout_train_logprobs_abs_diff_mean": v["mismatch"], "timing/step": 140.0})
        if i % 10 == 0: rows.append({"_step": i, "eval/all/avg_score": v["heldout"], "eval/all/pass_at_8": min(1.0, v["heldout"] + 0.2)})
    write_jsonl(HERE / "skyrl" / "files" / "wandb-history.jsonl", rows)

def nemo_rl():
    "NeMo RL: grpo_train logs train/<metric> (and validation/<metric>) at step total_steps + 1."
    rows = []
    for i in range(1, N + 1):
        v = run(i)
        rows.append({"_step": i, "train/reward": v["reward"], "train/approx_entropy": v["entropy"], "train/kl_penalty": v["kl"],
                     "train/mean_gen_tokens_per_sample": v["length"], "train/truncation_rate": v["trunc"], "train/loss": v["loss"],
                     "train/grad_norm": v["grad"], "train/lr": v["lr"], "train/gen_kl_error": v["mismatch"],
                     "train/sampling_importance_ratio": v["is_ratio"], "train/token_mult_prob_error": 1.0 + v["mismatch"],
                     "timing/train/total_step_time": 140.0})
        if i % 10 == 0: rows.append({"_step": i, "validation/accuracy": v["heldout"], "validation/avg_length": v["length"]})
    write_jsonl(HERE / "nemo_rl" / "files" / "wandb-history.jsonl", rows)

def prime_rl():
    "prime-rl 0.8: its file monitor's metrics.jsonl, one flat row per log call: the trainer's and the orchestrator's."
    rows = []
    for i in range(1, N + 1):
        v = run(i)
        rows.append({"step": i, "time": 1760000000.0 + 40 * i, "optim/lr": v["lr"], "optim/grad_norm": v["grad"]})
        rows.append({"step": i, "time": 1760000001.0 + 40 * i, "loss/mean": v["loss"], "entropy/all/mean": v["entropy"], "entropy/all/max": 4.0,
                     "is_masked/mean": v["clip"], "is_masked_low/mean": v["clip"] / 2, "is_masked_high/mean": v["clip"] / 2,
                     "mismatch_kl/all/mean": v["mismatch"]})
        rows.append({"step": i, "time": 1760000003.0 + 40 * i, "train/agg/effective/agent/reward/mean": v["reward"],
                     "train/agg/effective/num_output_tokens/mean": v["length"], "train/agg/effective/agent/is_truncated/mean": v["trunc"],
                     "off_policy/mean": 0.8, "time/step": 41.2})
        if i % 10 == 0: rows.append({"step": i, "time": 1760000004.0 + 40 * i, "eval/math/effective/agent/avg@4": v["heldout"]})
    write_jsonl(HERE / "prime_rl" / "metrics.jsonl", rows)

if __name__ == "__main__":
    for f in (openrlhf, skyrl, nemo_rl, prime_rl): f()
