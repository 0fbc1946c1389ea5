"""Asynchronous generation (`TrainConfig.async_generation`): the next batch is sampled in a thread while the step learns,
on the weights `sampler_lag` updates old. It computes the synchronous lagged run (every metric and the final weights
equal), logs each row's staleness, resumes exactly after a stop, and refuses what it cannot do by name."""
import pytest
import torch
from rl_notes.trainconfig import TrainConfig, get_algo, RUN_CONTROL
from rl_notes.trainer import train
from rl_notes.lab import lab_key


@pytest.fixture(scope="module")
def learnt(tmp_path_factory):
    from rl_notes.fingerprint import micro_model
    return str(micro_model(tmp_path_factory.mktemp("learnt")))


def kw(learnt, **extra):
    return {**dict(model=learnt, algo=get_algo("grpo", beta=0.0), task_kw=dict(max_digits=1, scratchpad=False), steps=6, n_prompts=4,
                   group_size=4, max_new_tokens=8, lr=1e-3, n_train=60, n_eval=4, eval_every=2, save_every=2, progress=False, threads=1), **extra}


def same_rows(a, b):
    "Every logged value but the clocks and the staleness the asynchronous loop adds."
    skip = lambda k: k.startswith("time") or k == "staleness"
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        diff = {k: (ra[k], rb.get(k)) for k in ra if not skip(k) and ra[k] != rb.get(k)}
        assert not diff, (ra["step"], diff)


def weights(run_dir):
    from safetensors.torch import load_file
    return load_file(str(run_dir / "model" / "model.safetensors"))


@pytest.mark.parametrize("lag", [1, 2, 8])
def test_async_is_the_synchronous_lagged_run(learnt, tmp_path, lag):
    n = max(6, lag + 2)
    a = train(TrainConfig(out_dir=str(tmp_path / "sync"), **kw(learnt, sampler_lag=lag, steps=n)))
    b = train(TrainConfig(out_dir=str(tmp_path / "async"), **kw(learnt, sampler_lag=lag, steps=n, async_generation=True)))
    same_rows(a, b)
    assert any(r.get("grad_norm", 0) > 0 for r in a)                                    # a run that learns
    assert [r["staleness"] for r in b if r["step"] >= 1] == [min(lag, s - 1) for s in range(1, n + 1)]
    wa, wb = weights(tmp_path / "sync"), weights(tmp_path / "async")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_async_resumes_exactly(learnt, tmp_path):
    """Stopped after step 3 (a checkpoint at step 2; the batch of step 4 was being sampled), then resumed: the rows and weights of
    the uninterrupted run; the batch sampled ahead was never learned from, and the resume draws it again."""
    full = train(TrainConfig(out_dir=str(tmp_path / "full"), **kw(learnt, sampler_lag=2, async_generation=True)))
    train(TrainConfig(out_dir=str(tmp_path / "cut"), stop_at=3, **kw(learnt, sampler_lag=2, async_generation=True)))
    res = train(TrainConfig(out_dir=str(tmp_path / "cut"), resume=True, **kw(learnt, sampler_lag=2, async_generation=True)))
    same_rows(full, res)
    wa, wb = weights(tmp_path / "full"), weights(tmp_path / "cut")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_failing_reward_in_the_sampler_thread_stops_the_run(learnt, tmp_path):
    "The sampler thread's exception reaches the loop at the step whose batch it was sampling (step 3: sampled while step 2 learnt)."
    import threading
    def reward(prompts, completions, **k):
        # the loop samples step 1's batch itself; the thread's first is step 2's, its second step 3's
        if threading.current_thread() is not threading.main_thread():
            seen.append(1)
            if len(seen) == 2: raise RuntimeError("reward server down")
        return [0.0] * len(completions)
    seen = []
    import json
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i % 10}+1="}) + "\n" for i in range(20)))
    cfg = TrainConfig(out_dir=str(tmp_path / "r"), dataset=str(data), reward=[reward], n_train=20,
                      **{k: v for k, v in kw(learnt, sampler_lag=1, async_generation=True).items() if k not in ("task_kw", "n_train")})
    from rl_notes.data import RewardFunctionError
    with pytest.raises(RewardFunctionError, match="reward server down") as e: train(cfg)
    assert getattr(e.value, "step", None) == 3


def test_settings(learnt):
    with pytest.raises(ValueError, match="set TrainConfig.sampler_lag"): TrainConfig(model="m", async_generation=True)
    assert TrainConfig(model="m", max_staleness=3, steps=10).sampler_lag == 3                  # the asynchronous trainers' name
    with pytest.raises(TypeError, match="max_staleness is sampler_lag"): TrainConfig(model="m", max_staleness=3, sampler_lag=2)
    assert "async_generation" in RUN_CONTROL
    c = dict(model="m", sampler_lag=2, out_dir="x")
    assert lab_key(TrainConfig(**c)) == lab_key(TrainConfig(async_generation=True, **c))       # the same run, the same key


def test_command_line(cli_cfg):
    code, cfg, _, err = cli_cfg("--async-generation", "--max-staleness", "2")
    assert code == 0 and cfg.async_generation and cfg.sampler_lag == 2, err
    code, _, _, err = cli_cfg("--async-generation")
    assert code == 2 and "sampler_lag" in err


@pytest.mark.parametrize("lag,sync,asynchronous", [(3, 3, True), (1, 2, False)])
def test_weight_sync_steps_async_and_sync(learnt, tmp_path, lag, sync, asynchronous):
    """Weights pushed to the sampler every `sync` updates, a batch at most `lag` updates old (max_staleness): past the start it
    is `lag` - `sync` + 1 to `lag` updates stale, every row logs it, and the asynchronous loop computes the synchronous one."""
    n = 8
    a = train(TrainConfig(out_dir=str(tmp_path / "sync"), **kw(learnt, sampler_lag=lag, weight_sync_steps=sync, steps=n)))
    want = [(s - 1) - -(-max(0, s - 1 - lag) // sync) * sync for s in range(1, n + 1)]
    assert [r["staleness"] for r in a if r["step"] >= 1] == want
    assert max(want) == lag and min(want[lag:]) == lag - sync + 1                           # bounded by max_staleness, in a cycle
    if asynchronous:
        b = train(TrainConfig(out_dir=str(tmp_path / "async"), **kw(learnt, sampler_lag=lag, weight_sync_steps=sync, steps=n, async_generation=True)))
        same_rows(a, b)
        assert [r["staleness"] for r in b if r["step"] >= 1] == want
        wa, wb = weights(tmp_path / "sync"), weights(tmp_path / "async")
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
    base = train(TrainConfig(out_dir=str(tmp_path / "every"), **kw(learnt, sampler_lag=lag, steps=n)))
    assert any(ra.get(k) != rb.get(k) for ra, rb in zip(a, base) for k in ("grad_norm", "reward"))   # the interval changes the run


def test_weight_sync_steps_resumes_exactly(learnt, tmp_path):
    "Stopped after step 5 (the sampler on version 3, the learner's push of update 6 not yet made), then resumed."
    c = dict(sampler_lag=3, weight_sync_steps=3, async_generation=True, steps=8)
    full = train(TrainConfig(out_dir=str(tmp_path / "full"), **kw(learnt, **c)))
    train(TrainConfig(out_dir=str(tmp_path / "cut"), stop_at=5, **kw(learnt, **c)))
    res = train(TrainConfig(out_dir=str(tmp_path / "cut"), resume=True, **kw(learnt, **c)))
    same_rows(full, res)
    assert [r.get("staleness") for r in full] == [r.get("staleness") for r in res]
    wa, wb = weights(tmp_path / "full"), weights(tmp_path / "cut")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_weight_sync_settings(cli_cfg):
    with pytest.raises(ValueError, match="weight_sync_steps"): TrainConfig(model="m", weight_sync_steps=0)
    with pytest.raises(ValueError, match=r"weight_sync_steps \(20\) must be <= steps"): TrainConfig(model="m", weight_sync_steps=20, sampler_lag=20, steps=10)
    with pytest.raises(ValueError, match="weight_sync_steps copy"): TrainConfig(model="m", weight_sync_steps=2, sampler_lag=2, lora_r=4)
    with pytest.raises(ValueError, match="set sampler_lag .* to 3 or more"): TrainConfig(model="m", weight_sync_steps=3, sampler_lag=1, async_generation=True)
    with pytest.raises(ValueError, match="set sampler_lag .* to 2 or more"): TrainConfig(model="m", weight_sync_steps=3)
    c = dict(model="m", sampler_lag=2, out_dir="x")
    assert lab_key(TrainConfig(**c)) == lab_key(TrainConfig(weight_sync_steps=1, **c))         # the default keeps the keys made before it existed
    assert lab_key(TrainConfig(**c)) != lab_key(TrainConfig(weight_sync_steps=2, **c))
    code, cfg, _, err = cli_cfg("--async-generation", "--max-staleness", "4", "--weight-sync-steps", "4")
    assert code == 0 and (cfg.sampler_lag, cfg.weight_sync_steps) == (4, 4), err
    code, _, _, err = cli_cfg("--async-generation", "--max-staleness", "1", "--weight-sync-steps", "4")
    assert code == 2 and "max_staleness" in err


def test_an_async_trl_config_file(cli_cfg, tmp_path):
    "An AsyncGRPOConfig's options in a --config file: max_staleness and weight_sync_steps land on their fields."
    import json
    p = tmp_path / "async.json"
    p.write_text(json.dumps({"learning_rate": 1e-6, "num_generations": 4, "max_staleness": 2, "weight_sync_steps": 2}))
    code, cfg, _, err = cli_cfg("--config", p, "--async-generation")
    assert code == 0 and (cfg.sampler_lag, cfg.weight_sync_steps, cfg.async_generation, cfg.group_size) == (2, 2, True, 4), err
