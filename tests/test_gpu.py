"CUDA: two steps of every preset with the whole batch on the GPU (skipped without CUDA; run it whenever a GPU is available)."
import dataclasses, math
import pytest, torch
from rl_notes.trainconfig import PRESETS, TrainConfig, get_algo
from rl_notes.report import Meter
from rl_notes.trainer import setup, collect, advantages, train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: checks that the trainer keeps every tensor on the GPU")

@pytest.mark.parametrize("name", sorted(PRESETS))
def test_two_steps_on_cuda(micro_sft, tmp_path, name):
    algo = get_algo(name, soft_overlong=True, cache_len=2, **({"value_pretrain_steps": 2} if name == "vapo" else {}))
    cfg = TrainConfig(model=micro_sft, algo=algo, task_kw=dict(max_digits=2, scratchpad=False), steps=2, n_prompts=4, group_size=4,
                      max_new_tokens=3, n_train=500, n_eval=8, eval_every=1, save_every=1, progress=False, out_dir=str(tmp_path / name))
    with setup(cfg) as run:
        assert run.device.type == "cuda" and next(run.policy.parameters()).device.type == "cuda"
        b = advantages(run, collect(run, 1, Meter()), Meter())
        for k in ("reward", "score", "correct", "mask", "loss_mask", "adv"): assert getattr(b, k).device.type == "cuda", k
        if run.critic is not None: assert b.values.device.type == b.returns.device.type == "cuda"
    rows = train(dataclasses.replace(cfg, overwrite=True))
    assert [r["step"] for r in rows if r.get("phase") is None] == [0, 1, 2]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in rows if "loss" in r)
    resumed = train(dataclasses.replace(cfg, steps=3, resume=True))          # a CUDA checkpoint (RNG states included) resumes
    assert resumed[-1]["step"] == 3
