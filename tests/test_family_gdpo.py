"""GDPO (rl_notes.family.gdpo_advantages, `Algo(adv="gdpo")`) against TRL 1.16's own branch for
multi_objective_aggregation="normalize_then_sum" (grpo_trainer.py, `_generate_and_score_completions`), restated here with
TRL's `nanstd`; and trained for a few steps with two reward functions through the command line's TRL name."""
import math
import pytest
import torch
from hypothesis import given, settings, strategies as st
from rl_notes.family import gdpo_advantages

trl_utils = pytest.importorskip("trl.trainer.utils")


def trl_normalize_then_sum(rewards_per_func, weights, G):
    "TRL's branch, restated: per function mean and nanstd within the group, weighted nansum, then batch normalisation."
    K = rewards_per_func.shape[1]
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    grouped = rewards_per_func.view(-1, G, K)
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = trl_utils.nanstd(grouped, dim=1, keepdim=True)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, K)
    rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    std = trl_utils.nanstd(rewards).expand_as(rewards)
    return torch.nan_to_num((rewards - torch.nanmean(rewards)) / (std + 1e-4), nan=0.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([2, 4, 8]), st.integers(1, 3), st.floats(0.0, 0.3))
def test_gdpo_matches_trl(seed, G, K, p_none):
    g = torch.Generator().manual_seed(seed)
    B = G * 4
    R = torch.randint(0, 3, (B, K), generator=g).float() * torch.rand(K, generator=g) * 5
    R[torch.rand(B, K, generator=g) < p_none] = float("nan")
    w = torch.rand(K, generator=g) + 0.5
    ours, trl = gdpo_advantages(R, w, G), trl_normalize_then_sum(R, w, G)
    assert torch.allclose(ours, trl, atol=1e-4, rtol=1e-4), (ours, trl)


def test_gdpo_trains_with_two_reward_functions(tmp_path):
    from rl_notes.fingerprint import micro_model
    from rl_notes.cli import main
    m = micro_model(tmp_path / "m")
    (tmp_path / "r.py").write_text("def right(prompts, completions, answer, **kw):\n    return [float(c.strip() == str(a)) for c, a in zip(completions, answer)]\n"
                                   "def long(prompts, completions, **kw):\n    return [10.0 * min(len(c), 5) / 5 for c in completions]\n")
    rc = main(["train", "--model", str(m), "--task", "addition", "--task-arg", "max_digits=1", "--task-arg", "scratchpad=false", "--reward", f"{tmp_path / 'r.py'}:right",
               "--reward", f"{tmp_path / 'r.py'}:long", "--multi-objective-aggregation", "normalize_then_sum", "--steps", "2", "--num-generations", "4",
               "--n-prompts", "4", "--max-completion-length", "5", "--n-train", "40", "--n-eval", "0", "--out", str(tmp_path / "run")])
    import json
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    rows = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rc == 0 and cfg["algo"]["adv"] == "gdpo" and rows[-1]["step"] == 2 and all(math.isfinite(r.get("loss", 0.0)) for r in rows)
