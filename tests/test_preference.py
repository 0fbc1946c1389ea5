"rl_notes.preference: DPOConfig validation; train_dpo's run directory (rl_notes.rundir) and checkpoints (exact resume, a kill between the swap's renames, damage, lock, overwrite)."
import json, math, os, subprocess, sys
import pytest
import torch
from rl_notes.preference import train_dpo, DPOConfig
from rl_notes.configs import ConfigError
from rl_notes.checkpoint import CheckpointError

torch.set_num_threads(1)


def _pairs(n, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda k: torch.randint(3, 40, (int(k),), generator=g).tolist()
    return [([1] + r(torch.randint(1, 4, (1,), generator=g)), r(torch.randint(1, 6, (1,), generator=g)),
             r(torch.randint(1, 6, (1,), generator=g))) for _ in range(n)]

PAIRS = _pairs(10, 0)
KW = dict(batch_size=4, lr=1e-2, eval_every=2, probe=4, save_every=2, nll_coef=0.5)
def C(steps): return DPOConfig(steps=steps, **KW)

@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_lm):
    a = tiny_lm(); h = train_dpo(a, None, PAIRS, C(7), out_dir=str(tmp_path_factory.mktemp("full") / "a"))
    return h, [p.detach().clone() for p in a.parameters()]

def _same(model, params): return all(torch.equal(p, q) for p, q in zip(model.parameters(), params))


@pytest.mark.parametrize("kw,msg", [
    (dict(steps=0), "DPOConfig.steps must be an int >= 1, got 0"),
    (dict(batch_size=2.0), "DPOConfig.batch_size must be an int >= 1, got 2.0"),
    (dict(lr=math.inf), "DPOConfig.lr must be a finite float > 0, got inf"),
    (dict(beta=-0.1), "DPOConfig.beta must be a finite float > 0, got -0.1"),
    (dict(reduction="max"), "DPOConfig.reduction must be one of 'sum', 'mean', got 'max'"),
    (dict(loss_type="kto"), "DPOConfig.loss_type must be one of"),
    (dict(max_grad_norm=0.0), "DPOConfig.max_grad_norm must be a finite float > 0 or None, got 0.0"),
    (dict(save_every=-1), "DPOConfig.save_every must be an int >= 1, got -1"),
    (dict(nll_coef=0.0, dpo_coef=0.0), "must not both be 0"),
])
def test_dpo_config_errors(kw, msg, tiny_lm):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")): DPOConfig(**kw)
    with pytest.raises(ValueError, match="must be a DPOConfig"): train_dpo(tiny_lm(), None, PAIRS, {"steps": 2, **kw})   # a dict is not a config
    with pytest.raises(TypeError, match="unexpected keyword"): train_dpo(tiny_lm(), None, PAIRS, DPOConfig(), **kw)   # one way to configure it

def test_split_run_equals_uninterrupted(tmp_path, uninterrupted, tiny_lm):
    ha, pa = uninterrupted
    b = tiny_lm(); train_dpo(b, None, PAIRS, C(4), out_dir=str(tmp_path / "b"))
    b = tiny_lm(); hb = train_dpo(b, None, PAIRS, C(7), out_dir=str(tmp_path / "b"))
    assert hb == ha and _same(b, pa)
    st = json.loads((tmp_path / "b" / "ckpt" / "state.json").read_text())
    assert st["step"] == 7 and sorted(st["files"]) == ["optim_policy.safetensors", "policy.safetensors", "ref_logps.safetensors", "rng_0.json"]
    assert json.loads((tmp_path / "b" / "done.json").read_text())["steps"] == 7
    with pytest.raises(ValueError, match="different run"): train_dpo(tiny_lm(), None, PAIRS[:9], C(7), out_dir=str(tmp_path / "b"))
    c = tiny_lm(); assert train_dpo(c, None, PAIRS, C(7), out_dir=str(tmp_path / "b")) == ha and _same(c, pa)   # finished: loads

def test_kill_between_renames_then_resume(tmp_path, monkeypatch, uninterrupted, tiny_lm):
    ha, pa = uninterrupted
    real, seen = os.replace, []
    def replace(a, b):
        if str(a).endswith("ckpt.tmp") and seen: raise KeyboardInterrupt("killed between the renames")
        if str(a).endswith("ckpt"): seen.append(a)
        real(a, b)
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt): train_dpo(tiny_lm(), None, PAIRS, C(7), out_dir=str(tmp_path / "k"))
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path / "k")) == [".rl_notes_run", "ckpt.old", "ckpt.tmp", "metrics.jsonl"]   # no ckpt/, no lock; the run marker
    k = tiny_lm()
    with pytest.warns(UserWarning, match="recovered"): hk = train_dpo(k, None, PAIRS, C(7), out_dir=str(tmp_path / "k"))
    assert hk == ha and _same(k, pa)

def test_partial_metrics_line_after_kill(tmp_path, uninterrupted, tiny_lm):
    ha, pa = uninterrupted
    train_dpo(tiny_lm(), None, PAIRS, C(4), out_dir=str(tmp_path / "p"))
    with open(tmp_path / "p" / "metrics.jsonl", "a") as f: f.write('{"step": 5, "dpo_l')          # killed mid-append
    p = tiny_lm()
    with pytest.warns(UserWarning, match="partial last line"): hp = train_dpo(p, None, PAIRS, C(7), out_dir=str(tmp_path / "p"))
    assert hp == ha and _same(p, pa)
    assert [json.loads(l) for l in open(tmp_path / "p" / "metrics.jsonl")] == ha

def test_damaged_checkpoint_is_refused(tmp_path, tiny_lm):
    train_dpo(tiny_lm(), None, PAIRS, C(4), out_dir=str(tmp_path / "d"))
    w = tmp_path / "d" / "ckpt" / "policy.safetensors"
    data = w.read_bytes(); w.write_bytes(data[:-32] + os.urandom(32))
    with pytest.raises(CheckpointError, match=r"cannot read policy .*corrupt"): train_dpo(tiny_lm(), None, PAIRS, C(7), out_dir=str(tmp_path / "d"))
    w.write_bytes(data)
    (tmp_path / "d" / "ckpt" / "ref_logps.safetensors").write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="cannot read ref_logps"): train_dpo(tiny_lm(), None, PAIRS, C(7), out_dir=str(tmp_path / "d"))
    st = json.loads((tmp_path / "d" / "ckpt" / "state.json").read_text()); st["step"] = -3
    (tmp_path / "d" / "ckpt" / "state.json").write_text(json.dumps(st))
    with pytest.raises(CheckpointError, match="field `step` must be an int >= 0, got -3"): train_dpo(tiny_lm(), None, PAIRS, C(7), out_dir=str(tmp_path / "d"))
    with pytest.raises(CheckpointError, match="beyond `steps`"):
        st["step"] = 9; (tmp_path / "d" / "ckpt" / "state.json").write_text(json.dumps(st))
        train_dpo(tiny_lm(), None, PAIRS, C(7), out_dir=str(tmp_path / "d"))

def test_lock_and_overwrite(tmp_path, uninterrupted, tiny_lm):
    ha, _ = uninterrupted
    out = tmp_path / "o"
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom rl_notes.rundir import RunLock\n"
                              "with RunLock(sys.argv[1]): print('locked', flush=True); time.sleep(120)", str(out)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(CheckpointError, match=f"is in use by process {child.pid}"): train_dpo(tiny_lm(), None, PAIRS, C(3), out_dir=str(out))
    finally: child.kill(); child.wait()
    train_dpo(tiny_lm(), None, PAIRS, C(3), out_dir=str(out))                                 # the dead owner's lock is stale
    with pytest.raises(CheckpointError, match=r"holds a previous run .*overwrite=True"):
        train_dpo(tiny_lm(), None, PAIRS, C(7), out_dir=str(out), resume=False)
    assert train_dpo(tiny_lm(), None, PAIRS, C(7), out_dir=str(out), overwrite=True) == ha
    assert not (out / ".lock").exists()
