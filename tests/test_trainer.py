"""Trainer: exact resume after a kill, clear errors for bad checkpoints and bad values, one run per directory, the tables.
The divergence guard (lr = 1e30 stops the run at step 2; a NaN loss at step 3 stops it before the update, the checkpoint of
step 2 kept) is checked by nbs/33_trainer.ipynb ("Divergence stops the run"), which `make test` runs."""
import json, math, os, random, shutil
import numpy as np, pytest, torch
from hypothesis import given, settings, strategies as st
from rl_notes.trainconfig import TrainConfig, Algo, get_algo, PRESETS, RUN_CONTROL
from rl_notes.trainer import train, setup
from rl_notes.report import Meter
from rl_notes.losses import ADVANTAGE_ESTIMATORS
from rl_notes.configs import ConfigError
from rl_notes.rundir import MetricsLog, RunLock
from rl_notes.checkpoint import CheckpointError, rng_state, set_rng_state, optim_to_safetensors, optim_from_safetensors
from rl_notes.ppo import terminal_rewards

@pytest.fixture
def micro(micro_sft):
    "The micro SFT checkpoint of conftest.py (a 1-layer width-32 Llama after 60 SFT steps on 1-2 digit addition), built once per session."
    return micro_sft

def small(micro, **kw):
    return dict(dict(model=micro, task_kw=dict(max_digits=2, scratchpad=False), steps=5, n_prompts=4, group_size=4, max_new_tokens=3,
                     n_train=500, n_eval=8, eval_every=2, save_every=2, progress=False, threads=1), **kw)

def strip(rows): return [{k: v for k, v in r.items() if not k.startswith("time")} for r in rows]
GRPO_SOFT = get_algo("grpo", soft_overlong=True, cache_len=2)

@pytest.mark.many_runs
@pytest.mark.parametrize("algo", [get_algo("dapo", cache_len=2), GRPO_SOFT, get_algo("ppo")])
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

def test_resume_after_a_kill_in_the_middle_of_writing(micro, tmp_path):
    "A kill between the checkpoint swap's two renames (no ckpt/, a complete ckpt.old/), and a half-written last metrics line."
    kw = small(micro, algo=GRPO_SOFT)
    full = train(TrainConfig(out_dir=str(tmp_path / "full"), **kw))
    out = tmp_path / "cut"
    train(TrainConfig(out_dir=str(out), stop_at=3, **kw))
    os.rename(out / "ckpt", out / "ckpt.old")
    with open(out / "metrics.jsonl", "a") as f: f.write('{"step": 4, "loss"')
    with pytest.warns(UserWarning):
        resumed = train(TrainConfig(out_dir=str(out), resume=True, **kw))
    assert strip(resumed) == strip(full) == strip(MetricsLog(out / "metrics.jsonl").read())

def test_bad_checkpoints(micro, tmp_path):
    kw = small(micro, algo=GRPO_SOFT, steps=2)
    out = tmp_path / "run"
    train(TrainConfig(out_dir=str(out), **kw))
    ck = out / "ckpt"
    with pytest.raises(CheckpointError, match="different configuration: group_size"):
        train(TrainConfig(out_dir=str(out), resume=True, **{**kw, "group_size": 2}))
    with pytest.raises(CheckpointError, match="different configuration: algo"):
        train(TrainConfig(out_dir=str(out), resume=True, **{**kw, "algo": get_algo("dapo", cache_len=2)}))
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
    with pytest.raises(CheckpointError, match="refusing to restart silently") as e:
        train(TrainConfig(out_dir=str(out), resume=True, **kw))
    assert "delete" not in str(e.value)                  # never advises deleting a directory that may hold checkpoints

def test_weights_of_another_model(micro, tmp_path):
    "A policy file of another architecture under an otherwise valid checkpoint (its checksum recorded anew)."
    from safetensors.torch import save_file
    from rl_notes.checkpoint import file_sha256
    kw = small(micro, algo=GRPO_SOFT, steps=2)
    out = tmp_path / "run"; train(TrainConfig(out_dir=str(out), **kw))
    save_file({"lm_head.weight": torch.zeros(3, 3)}, str(out / "ckpt" / "policy.safetensors"))
    st = json.loads((out / "ckpt" / "state.json").read_text())
    st["files"]["policy.safetensors"] = file_sha256(out / "ckpt" / "policy.safetensors")
    (out / "ckpt" / "state.json").write_text(json.dumps(st))
    with pytest.raises(CheckpointError, match="policy"):
        train(TrainConfig(out_dir=str(out), resume=True, **kw))

def test_one_run_per_directory(micro, tmp_path):
    kw = small(micro, algo=GRPO_SOFT, steps=2)
    out = tmp_path / "run"
    first = train(TrainConfig(out_dir=str(out), **kw))
    with pytest.raises(CheckpointError, match="holds a previous run"):          # a fresh run never silently replaces one
        train(TrainConfig(out_dir=str(out), **kw))
    with RunLock(out):                                                            # another live process holds the directory
        with pytest.raises(CheckpointError, match="is in use"):
            train(TrainConfig(out_dir=str(out), resume=True, **{**kw, "steps": 3}))
    assert strip(MetricsLog(out / "metrics.jsonl").read()) == strip(first)      # untouched by the refused runs
    again = train(TrainConfig(out_dir=str(out), overwrite=True, **{**kw, "steps": 1}))
    assert [r["step"] for r in MetricsLog(out / "metrics.jsonl").read()] == [r["step"] for r in again] == [0, 1]
    assert not (out / ".lock").exists()                                           # released at the end of the run

def test_a_new_estimator_is_one_entry(micro, tmp_path, monkeypatch):
    "A baseline of the group's best reward, registered in the table, trains through the same loop."
    def adv_vs_best(algo, batch, reduce=None):
        r = batch.score.view(-1, batch.group_size)
        return (r - r.max(-1, keepdim=True).values).view(-1), None
    monkeypatch.setitem(ADVANTAGE_ESTIMATORS, "vs-best", adv_vs_best)
    rows = train(TrainConfig(out_dir=str(tmp_path / "vs"), **small(micro, algo=get_algo("grpo", adv="vs-best", soft_overlong=True, cache_len=2), steps=2)))
    assert [r["step"] for r in rows] == [0, 1, 2] and all(math.isfinite(r["loss"]) for r in rows[1:])

FAMILY = [get_algo(n) for n in ("gspo", "cispo", "rloo", "reinforce_pp", "kl_cov", "rft")] + [
    get_algo("grpo", tis="token_truncate"), get_algo("grpo", tis="sequence_mask", tis_c_min=0.5),
    get_algo("dapo", cache_len=2, top_entropy_quantile=0.2), get_algo("grpo", clip_cov_ratio=0.05)]

@pytest.mark.many_runs
@pytest.mark.parametrize("algo", FAMILY, ids=lambda a: f"{a.name}-{a.tis}-{a.top_entropy_quantile}-{a.clip_cov_ratio}")
def test_family_presets_and_flags_train(micro, tmp_path, algo):
    "Every estimator of the family trains through the loop: finite losses, the standard metrics, off-policy minibatches."
    rows = train(TrainConfig(out_dir=str(tmp_path / "r"), **small(micro, algo=algo, steps=2, n_minibatches=2, ppo_epochs=2)))
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows[1:]:
        assert all(math.isfinite(r[k]) for k in ("loss", "grad_norm", "entropy", "clipfrac_high", "approx_kl"))

def test_config_errors(micro):
    with pytest.raises(ValueError, match="unknown algo"): TrainConfig(algo="nope")
    with pytest.raises(ValueError, match="group_size must be >= 2"): train(TrainConfig(**small(micro, algo="grpo", group_size=1)))
    with pytest.raises(FileNotFoundError, match="is not a directory"): train(TrainConfig(**small(micro, model="/no/such/dir")))
    with pytest.raises(ValueError, match="unknown task"): train(TrainConfig(**small(micro, task="sorting")))

@pytest.mark.parametrize("kw,msg", [
    (dict(warmup_steps=-5), "TrainConfig.warmup_steps must be an int >= 0, got -5"),
    (dict(eval_every=-1), "TrainConfig.eval_every must be an int >= 0, got -1"),
    (dict(save_every=-1), "TrainConfig.save_every must be an int >= 0, got -1"),
    (dict(threads=-3), "TrainConfig.threads must be an int >= 1 or None, got -3"),
    (dict(lr=float("inf")), "TrainConfig.lr must be a finite float >= 0, got inf"),
    (dict(temperature=0), "TrainConfig.temperature must be a finite float > 0, got 0"),
    (dict(n_prompts=True), "TrainConfig.n_prompts must be an int >= 1, got True"),
    (dict(task_kw=[1]), "TrainConfig.task_kw must be a dict"),
    (dict(algo=Algo(), stop_at=-1), "TrainConfig.stop_at must be an int >= 0 or None, got -1"),
])
def test_every_field_is_type_checked(kw, msg):
    with pytest.raises(ConfigError) as e: TrainConfig(**kw)
    assert msg in str(e.value)

@pytest.mark.parametrize("kw,msg", [
    (dict(dynamic_sampling="maybe"), "Algo.dynamic_sampling must be a bool, got 'maybe'"),
    (dict(eps_high="0.3x"), "Algo.eps_high must be a finite float >= 0, got '0.3x'"),
    (dict(beta=-0.1), "Algo.beta must be a finite float >= 0, got -0.1"),
    (dict(dual_clip=1.0), "Algo.dual_clip must be a finite float > 1 or None, got 1.0"),
    (dict(lam_critic=1.5), "Algo.lam_critic must be a finite float >= 0 and <= 1, got 1.5"),
    (dict(kl="k4"), "Algo.kl must be one of 'k1', 'k2', 'k3', got 'k4'"),
    (dict(loss="ppo2"), "Algo.loss must be one of 'clip', 'nll', 'gspo', 'cispo', 'sapo', 'vespo', 'kl_cov', 'dppo', 'flash_reinforce', got 'ppo2'"),
])
def test_every_algo_field_is_type_checked(kw, msg):
    with pytest.raises(ConfigError) as e: get_algo("grpo", **kw)
    assert msg in str(e.value)

def test_out_dir_that_is_a_file(tmp_path):
    f = tmp_path / "f"; f.write_text("x")
    for p in (f, f / "sub"):
        with pytest.raises(ConfigError, match="TrainConfig.out_dir must be a directory path"): TrainConfig(out_dir=str(p))

def test_run_control_fields_exist():
    fields = set(TrainConfig.__dataclass_fields__)
    assert set(RUN_CONTROL) <= fields and "overwrite" in RUN_CONTROL
    assert set().union(*PRESETS.values()) <= set(Algo.__dataclass_fields__)

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

def test_foreach_adamw_is_bit_identical(micro, tmp_path):
    "The run's AdamW takes foreach=True (one C++ call per update op); on the CPU it runs the same per-tensor kernels: equal weights."
    from rl_notes.models import load_model
    from rl_notes.rollout import generate, response_logprobs
    with setup(TrainConfig(out_dir=str(tmp_path / "r"), **small(micro, algo="ppo"))) as run:
        assert run.opt.param_groups[0]["foreach"] is True and run.copt.param_groups[0]["foreach"] is True
    (m1, tok), (m2, _) = load_model(micro), load_model(micro)
    ro = generate(m1, tok, ["1+2=", "34+5="], group_size=2, max_new_tokens=4, seed=0)
    o1, o2 = torch.optim.AdamW(m1.parameters(), lr=1e-2, weight_decay=0.1), torch.optim.AdamW(m2.parameters(), lr=1e-2, weight_decay=0.1, foreach=True)
    for _ in range(3):
        for m, o in ((m1, o1), (m2, o2)):
            (-response_logprobs(m, ro).sum()).backward(); o.step(); o.zero_grad(set_to_none=True)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    assert not torch.equal(next(m1.parameters()), next(load_model(micro)[0].parameters()))   # the steps did change the weights

def test_terminal_rewards():
    m = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]])
    assert terminal_rewards(torch.tensor([1., 5., 2.]), m).tolist() == [[0, 1, 0], [0, 0, 0], [0, 0, 2]]


def test_truncated_sampling_ratio_is_one_on_policy(micro_sft, tmp_path):
    "top-p / top-k / min-p: the learner renormalises on the sampler's support, so the first update's ratio is 1 (the naive one is Z < 1)."
    from rl_notes.trainconfig import TrainConfig, get_algo
    from rl_notes.trainer import train
    for kw in (dict(top_p=0.8), dict(top_k=3), dict(top_k=5, top_p=0.9, min_p=0.05)):
        cfg = TrainConfig(model=micro_sft, algo=get_algo("grpo", beta=0.0), task="addition", task_kw=dict(max_digits=2, scratchpad=False),
                          steps=2, n_prompts=4, group_size=4, max_new_tokens=4, n_eval=0, n_train=200, progress=False, threads=1,
                          out_dir=str(tmp_path / "_".join(map(str, kw.values()))), **kw)
        rows = [r for r in train(cfg) if r.get("ratio_mean") is not None]
        assert len(rows) == 2 and all(abs(r["ratio_mean"] - 1) < 1e-5 for r in rows), (kw, [r["ratio_mean"] for r in rows])


def test_save_total_limit_keeps_the_latest_checkpoint_folders(tmp_path):
    "TRL's checkpoint-N/ folders: each save writes one (a model directory), the latest save_total_limit stay, a planted link is never followed."
    import json
    from conftest import make_chat_world
    from rl_notes.models import load_model
    from rl_notes.trainer import train
    w = make_chat_world(tmp_path, "def one(prompts, completions, **kw): return [float(sum(map(ord, c[0]['content'])) % 3) for c in completions]\n")
    outside = tmp_path / "outside"; outside.mkdir(); (outside / "keep.txt").write_text("user data")
    run = tmp_path / "run"
    kw = dict(model=str(w / "model"), dataset=str(w / "chat.jsonl"), reward=[str(w / "rewards.py") + ":one"], steps=4, save_every=1,
              n_prompts=2, group_size=2, max_new_tokens=3, n_eval=0, progress=False, threads=1, out_dir=str(run))
    train(TrainConfig(**kw, save_total_limit=2, stop_at=2))
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    (run / "checkpoint-3").symlink_to(outside)   # planted where step 3's folder will go
    train(TrainConfig(**kw, save_total_limit=2, resume=True))
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]
    assert (outside / "keep.txt").read_text() == "user data" and sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    for n in (3, 4):
        assert json.loads((run / f"checkpoint-{n}" / "rl_notes_export.json").read_text())["step"] == n
    m3, _ = load_model(run / "checkpoint-3"); m4, _ = load_model(run / "model")
    assert any(not torch.equal(a, b) for a, b in zip(m3.parameters(), m4.parameters()))   # step 3's weights, not the last
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["task"] is None and cfg["task_kw"] == {}   # a dataset scored by reward functions reads no task


def test_task_none_needs_dataset_and_reward():
    with pytest.raises(ValueError, match=r"TrainConfig.task=None needs both dataset"):
        TrainConfig(model="m", task=None)
    assert TrainConfig(model="m", dataset="d.jsonl", reward=["r.py:f"], task="countdown").task is None
    assert TrainConfig(model="m", dataset="d.jsonl").task == "addition"   # the task's verifier scores the dataset
