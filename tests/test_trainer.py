"Trainer: exact resume after a kill, clear errors for bad checkpoints, and the small pieces (meters, optimizer/RNG state)."
import json, math, random, shutil
import numpy as np, pytest, torch
from hypothesis import given, settings, strategies as st
from rl_notes.trainer import (TrainConfig, train, get_algo, Meter, CheckpointError, rng_state, set_rng_state,
                              optim_to_safetensors, optim_from_safetensors, terminal_rewards)

@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    "A 1-layer width-32 Llama after 60 SFT steps on 1-2 digit addition (seconds; cached per test session)."
    from rl_notes.models import sft_warm_start
    d = tmp_path_factory.mktemp("sft")
    return str(sft_warm_start("addition", model_cfg=dict(hidden_size=32, num_layers=1, heads=2), steps=60, batch_size=32,
                              eval_n=0, n_train=2000, cache_dir=d, progress=False, max_digits=2, scratchpad=False))

def small(micro, **kw):
    return dict(dict(model=micro, task_kw=dict(max_digits=2, scratchpad=False), steps=5, n_prompts=4, group_size=4, max_new_tokens=3,
                     n_train=500, n_eval=8, eval_every=2, save_every=2, progress=False, threads=1), **kw)

def strip(rows): return [{k: v for k, v in r.items() if not k.startswith("time")} for r in rows]

@pytest.mark.parametrize("algo", [get_algo("dapo", overlong_cache=2), get_algo("grpo", soft_overlong=True, overlong_cache=2),
                                  get_algo("ppo")])
def test_resume_is_exact(micro, tmp_path, algo):
    kw = small(micro, algo=algo, **({"ppo_epochs": 2, "n_minibatches": 2} if algo.uses_critic else {}))
    full = train(TrainConfig(out_dir=str(tmp_path / "full"), **kw))
    cut = train(TrainConfig(out_dir=str(tmp_path / "cut"), stop_at=3, **kw))     # killed after step 3, checkpoint at 2
    assert cut[-1]["step"] == 3
    resumed = train(TrainConfig(out_dir=str(tmp_path / "cut"), resume=True, **kw))
    assert strip(resumed) == strip(full)
    on_disk = [json.loads(l) for l in open(tmp_path / "cut" / "metrics.jsonl")]
    assert strip(on_disk) == strip(full)
    assert any(r.get("grad_norm", 0) > 0 for r in full)     # the run actually trained

def test_bad_checkpoints(micro, tmp_path):
    kw = small(micro, algo=get_algo("grpo", soft_overlong=True, overlong_cache=2), steps=2)
    out = tmp_path / "run"
    train(TrainConfig(out_dir=str(out), **kw))
    ck = out / "ckpt"
    with pytest.raises(CheckpointError, match="different configuration: group_size"):
        train(TrainConfig(out_dir=str(out), resume=True, **{**kw, "group_size": 2}))
    with pytest.raises(CheckpointError, match="different configuration: algo"):
        train(TrainConfig(out_dir=str(out), resume=True, **{**kw, "algo": "dapo"}))
    good = (ck / "policy.safetensors").read_bytes()
    (ck / "policy.safetensors").write_bytes(good[: len(good) // 2])                 # truncated
    with pytest.raises(CheckpointError, match="cannot read policy"):
        train(TrainConfig(out_dir=str(out), resume=True, **kw))
    (ck / "policy.safetensors").write_bytes(good)
    (ck / "rng_0.json").write_text("[1, 2")
    with pytest.raises(CheckpointError, match="RNG"):
        train(TrainConfig(out_dir=str(out), resume=True, **kw))
    (ck / "state.json").write_text('{"version": 99}')
    with pytest.raises(CheckpointError, match="not a version-1"):
        train(TrainConfig(out_dir=str(out), resume=True, **kw))
    shutil.rmtree(ck)
    with pytest.raises(CheckpointError, match="refusing to restart silently"):
        train(TrainConfig(out_dir=str(out), resume=True, **kw))

def test_weights_of_another_model(micro, tmp_path):
    "A policy file of another architecture under an otherwise valid checkpoint."
    from safetensors.torch import save_file
    kw = small(micro, algo=get_algo("grpo", soft_overlong=True, overlong_cache=2), steps=2)
    out = tmp_path / "run"; train(TrainConfig(out_dir=str(out), **kw))
    save_file({"lm_head.weight": torch.zeros(3, 3)}, str(out / "ckpt" / "policy.safetensors"))
    with pytest.raises(CheckpointError, match="policy"):
        train(TrainConfig(out_dir=str(out), resume=True, **kw))

def test_config_errors(micro):
    with pytest.raises(ValueError, match="unknown algo"): TrainConfig(algo="nope")
    with pytest.raises(ValueError, match="group_size must be >= 2"): train(TrainConfig(**small(micro, algo="grpo", group_size=1)))
    with pytest.raises(FileNotFoundError, match="is not a directory"): train(TrainConfig(**small(micro, model="/no/such/dir")))
    with pytest.raises(ValueError, match="unknown task"): train(TrainConfig(**small(micro, task="sorting")))

@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e3, 1e3), st.integers(0, 50)), min_size=1, max_size=20))
def test_meter_is_weighted_mean(pairs):
    m = Meter()
    for v, w in pairs: m.add("x", v, w)
    W = sum(w for _, w in pairs)
    got = m.result()["x"]
    if W == 0: assert got is None
    else: assert math.isclose(got, sum(v * w for v, w in pairs) / W, rel_tol=1e-9, abs_tol=1e-9)

def test_optimizer_and_rng_roundtrip():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2); opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    for _ in range(3): net(torch.randn(4, 3)).pow(2).sum().backward(); opt.step(); opt.zero_grad()
    t, meta = optim_to_safetensors(opt)
    meta = json.loads(json.dumps(meta))
    opt2 = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=1.0)
    optim_from_safetensors(opt2, t, meta)
    for k, v in opt.state_dict()["state"].items():
        for n, x in v.items(): torch.testing.assert_close(opt2.state_dict()["state"][k][n], x)
    assert opt2.param_groups[0]["lr"] == 1e-2
    s = json.loads(json.dumps(rng_state()))
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(s)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a

def test_terminal_rewards():
    m = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]])
    assert terminal_rewards(torch.tensor([1., 5., 2.]), m).tolist() == [[0, 1, 0], [0, 0, 0], [0, 0, 2]]
