"The lab's disk rooms: rl_notes.configs (config validation), rl_notes.cache (cache paths, code version), rl_notes.rundir (metrics log, run lock, the run directory), rl_notes.checkpoint (checkpoint swap and recovery)."
import json, math, os, socket, subprocess, sys, time, warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
import pytest
import torch
from rl_notes.configs import ConfigError, validate_config
from rl_notes.cache import cache_dir, code_version
from rl_notes.rundir import MetricsLog, RunLock, RunDir, run_mode
from rl_notes.checkpoint import CheckpointError

torch.set_num_threads(1)


# ---------------------------------------------------------------- validate_config
@dataclass
class Inner:
    kind: Literal["k1", "k2"] = "k1"
    def __post_init__(self): validate_config(self)

@dataclass
class Cfg:
    warmup_steps: int = field(default=0, metadata=dict(ge=0))
    every: int = field(default=1, metadata=dict(ge=1))
    lr: float = field(default=1e-3, metadata=dict(gt=0))
    beta: float = field(default=0.1, metadata=dict(ge=0, allow_inf=True))
    stop: int|None = field(default=None, metadata=dict(ge=1))
    flag: bool = False
    name: str = "x"
    mode: str = field(default="a", metadata=dict(choices=("a", "b")))
    kw: dict = field(default_factory=dict)
    seq: tuple = ()
    ids: list[int] = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)
    odd: int = field(default=1, metadata=dict(check=lambda v: None if v % 2 else "an odd int"))
    def __post_init__(self): validate_config(self)

@pytest.mark.parametrize("kw,msg", [
    (dict(warmup_steps=-5), "Cfg.warmup_steps must be an int >= 0, got -5"),
    (dict(every=-1), "Cfg.every must be an int >= 1, got -1"),
    (dict(every=True), "Cfg.every must be an int >= 1, got True"),
    (dict(every=1.0), "Cfg.every must be an int >= 1, got 1.0"),
    (dict(lr=math.inf), "Cfg.lr must be a finite float > 0, got inf"),
    (dict(lr=math.nan), "Cfg.lr must be a finite float > 0, got nan"),
    (dict(lr="0.1"), "Cfg.lr must be a finite float > 0, got '0.1'"),
    (dict(beta=math.nan), "Cfg.beta must be a float (not NaN) >= 0, got nan"),
    (dict(stop=0), "Cfg.stop must be an int >= 1 or None, got 0"),
    (dict(flag="maybe"), "Cfg.flag must be a bool, got 'maybe'"),
    (dict(flag=0), "Cfg.flag must be a bool, got 0"),
    (dict(name=3), "Cfg.name must be a str, got 3"),
    (dict(mode="c"), "Cfg.mode must be one of 'a', 'b', got 'c'"),
    (dict(kw="{}"), "Cfg.kw must be a dict, got '{}'"),
    (dict(seq=[1]), "Cfg.seq must be a tuple, got [1]"),
    (dict(ids=[1, 2.5]), "Cfg.ids must be a list of int, got [1, 2.5]"),
    (dict(inner="k1"), "Cfg.inner must be an Inner, got 'k1'"),
    (dict(odd=2), "Cfg.odd must be an odd int, got 2"),
])
def test_validate_config_errors(kw, msg):
    with pytest.raises(ConfigError) as e: Cfg(**kw)
    assert str(e.value) == msg
    assert isinstance(e.value, ValueError)

def test_validate_config_accepts():
    Cfg(); Cfg(lr=1, beta=math.inf, stop=3, flag=True, mode="b", kw={"a": 1}, seq=(1, "x"), ids=[1, 2], odd=3)
    c = Cfg(); c.inner.kind = "k3"
    with pytest.raises(ConfigError, match="Inner.kind must be one of 'k1', 'k2', got 'k3'"): validate_config(c)
    with pytest.raises(TypeError): validate_config(Cfg)


# ---------------------------------------------------------------- cache_dir, code_version
def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("RL_NOTES_CACHE", raising=False); monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_dir("sft") == Path.home() / ".cache" / "rl_notes" / "sft"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir("lab", "k") == tmp_path / "rl_notes" / "lab" / "k"
    monkeypatch.setenv("RL_NOTES_CACHE", str(tmp_path / "c"))
    assert cache_dir("lab") == tmp_path / "c" / "lab"

def test_code_version_hashes_the_lab_modules(tmp_path):
    import rl_notes
    v = code_version()
    assert v.startswith(rl_notes.__version__ + "+") and code_version() is v
    # a copy of the package with one changed module hashes differently; a changed cli.py does not count
    pkg = tmp_path / "rl_notes"; pkg.mkdir()
    for f in Path(rl_notes.__file__).parent.glob("*.py"): (pkg / f.name).write_bytes(f.read_bytes())
    def version_of(): return subprocess.run([sys.executable, "-c", "import rl_notes.cache as c; print(c.code_version())"],
                                            cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    v0 = version_of(); assert v0 == v
    (pkg / "cli.py").write_text((pkg / "cli.py").read_text() + "\n# comment\n"); assert version_of() == v0
    (pkg / "ppo.py").write_text((pkg / "ppo.py").read_text() + "\n# comment\n"); assert version_of() != v0

def test_code_version_of_an_import_closure(tmp_path):
    import rl_notes
    pkg = tmp_path / "rl_notes"; pkg.mkdir()
    for f in Path(rl_notes.__file__).parent.glob("*.py"): (pkg / f.name).write_bytes(f.read_bytes())
    def versions(): return subprocess.run([sys.executable, "-c", "import rl_notes.cache as c; print(c.code_version('lab'), c.code_version('sft'))"],
                                          cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
    lab0, sft0 = versions()
    (pkg / "newmod.py").write_text("x = 1\n"); assert versions() == [lab0, sft0]           # a module nothing imports: no change
    (pkg / "trainer.py").write_text((pkg / "trainer.py").read_text() + "\n# comment\n")
    lab1, sft1 = versions(); assert lab1 != lab0 and sft1 == sft0                         # the trainer is in the lab's closure, not SFT's
    (pkg / "rollout.py").write_text((pkg / "rollout.py").read_text() + "\n# comment\n")
    lab2, sft2 = versions(); assert lab2 != lab1 and sft2 != sft1                         # the sampler is in both


# ---------------------------------------------------------------- MetricsLog
def test_metrics_log_round_trip_and_partial_line(tmp_path):
    ml = MetricsLog(tmp_path / "metrics.jsonl")
    assert ml.read() == []
    rows = [{"step": i, "loss": i / 3} for i in range(12)]
    for r in rows: ml.append(r)
    assert ml.read() == rows
    with open(ml.path, "ab") as f: f.write(b'{"step": 12, "lo')                      # a kill in the middle of an append
    with pytest.warns(UserWarning, match="partial last line"): assert ml.read() == rows
    ml2 = MetricsLog(ml.path)
    with pytest.warns(UserWarning): ml2.append({"step": 12})                           # the partial line is cut first
    assert ml2.read() == rows + [{"step": 12}]
    ml.path.write_bytes(b'{"step": 0}\n{"step": 1}')                                    # a valid row without its newline
    with pytest.warns(UserWarning, match="without a newline"): assert ml.read() == [{"step": 0}]

def test_metrics_log_bad_middle_line_names_file_and_line(tmp_path):
    p = tmp_path / "metrics.jsonl"; p.write_text('{"step": 0}\n{oops\n{"step": 2}\n')
    with pytest.raises(CheckpointError, match=r"metrics.jsonl: line 2 is not JSON"): MetricsLog(p).read()
    p.write_text('{"step": 0}\n[1, 2]\n{"step": 2}\n')
    with pytest.raises(CheckpointError, match="line 2 is not a JSON object"): MetricsLog(p).read()

def test_metrics_rewrite_is_atomic(tmp_path, monkeypatch):
    ml = MetricsLog(tmp_path / "metrics.jsonl")
    rows = [{"step": i} for i in range(12)]
    ml.rewrite(rows)
    def killed(*a, **k): raise KeyboardInterrupt("killed during the rewrite")
    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt): ml.rewrite(rows[:3])
    monkeypatch.undo()
    assert ml.read() == rows                                                           # all 12 rows, not 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]             # no temp file left


# ---------------------------------------------------------------- RunLock, RunDir
def test_run_lock(tmp_path):
    with RunLock(tmp_path) as lk:
        d = json.loads(lk.path.read_text())
        assert d["pid"] == os.getpid() and d["host"] == socket.gethostname() and d["time"] > 0
        with pytest.raises(CheckpointError, match=f"is in use by process {os.getpid()}"): RunLock(tmp_path).acquire()
    assert not (tmp_path / ".lock").exists()
    with pytest.raises(RuntimeError):
        with RunLock(tmp_path): raise RuntimeError()
    assert not (tmp_path / ".lock").exists()

def test_run_lock_live_and_stale_owner(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom rl_notes.rundir import RunLock\n"
                              "with RunLock(sys.argv[1]): print('locked', flush=True); time.sleep(120)", str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(CheckpointError, match=f"{tmp_path} is in use by process {child.pid}"): RunLock(tmp_path).acquire()
    finally: child.kill(); child.wait()
    with RunLock(tmp_path) as lk: assert json.loads(lk.path.read_text())["pid"] == os.getpid()   # the dead owner's lock is stale
    (tmp_path / ".lock").write_text("not json"); os.utime(tmp_path / ".lock", (0, 0))
    with RunLock(tmp_path): pass
    assert not (tmp_path / ".lock").exists()

def test_run_lock_one_winner(tmp_path):
    "Processes racing for one stale lock: exactly one gets it."
    dead = subprocess.Popen([sys.executable, "-c", "pass"]); dead.wait()
    (tmp_path / ".lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "time": 0}))
    code = ("import sys, time\nfrom rl_notes.rundir import RunLock, CheckpointError\n"
            "import os\nopen(sys.argv[2] + '.ready.' + str(os.getpid()), 'w').close()\n"
            "while not os.path.exists(sys.argv[2]): time.sleep(0.01)\n"
            "try:\n    with RunLock(sys.argv[1]): print('won', flush=True); time.sleep(3)\n"
            "except CheckpointError: print('lost', flush=True)\n")
    go = tmp_path.parent / f"{tmp_path.name}.go"
    ps = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(go)], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    t0 = time.time()
    while len(list(tmp_path.parent.glob(f"{go.name}.ready.*"))) < 4 and time.time() - t0 < 120: time.sleep(0.05)
    go.write_text("")                                                                  # all imported: start together
    out = sorted(p.communicate(timeout=60)[0].strip() for p in ps)
    assert out == ["lost", "lost", "lost", "won"], out

def test_run_dir_modes(tmp_path):
    run = tmp_path / "run"; rd = RunDir(run)
    rd.prepare("fresh"); assert run.is_dir()
    (run / "metrics.jsonl").write_text('{"step": 0}\n'); (run / "ckpt.tmp").mkdir(); (run / ".lock").write_text("{}")
    with pytest.raises(CheckpointError, match=r"holds a previous run .*pass resume=True \(--resume\) to continue it or overwrite=True \(--overwrite\) to replace it"):
        rd.prepare("fresh")
    with pytest.raises(CheckpointError, match="holds no checkpoint .* refusing to restart silently"): rd.prepare("resume")   # rows, no checkpoint
    assert (run / "metrics.jsonl").exists()
    rd.prepare("overwrite")
    assert sorted(p.name for p in run.iterdir()) == [".lock", ".rl_notes_run"]
    RunDir(tmp_path / "new").prepare("resume")                                            # resume with nothing there: fresh
    (tmp_path / "f").write_text("")
    with pytest.raises(CheckpointError, match="not a directory"): RunDir(tmp_path / "f").prepare("fresh")
    with pytest.raises(ValueError, match="exclude each other"): run_mode(True, True)
    with pytest.raises(ValueError, match="`mode` must be one of"): rd.prepare("append")
    for m in ("ckpt.old", "done.json"):
        (run / m).mkdir() if m.startswith("ckpt") else (run / m).write_text("{}")
        with pytest.raises(CheckpointError, match="previous run"): rd.prepare("fresh")
        rd.prepare("overwrite")
    (run / "log.txt").write_text("x"); (run / "config.json").write_text("{}"); (run / "job.json").write_text("{}"); (run / "metrics.jsonl").write_text("")
    rd.prepare("overwrite", keep=("log.txt",))
    assert sorted(p.name for p in run.iterdir()) == [".lock", ".rl_notes_run", "job.json", "log.txt"]    # the runner's job and (kept) log stay
    (run / "config.json").write_text("{}")
    for mode in ("fresh", "resume", "overwrite"): rd.prepare(mode)                       # no previous run: nothing is deleted
    assert sorted(p.name for p in run.iterdir()) == [".lock", ".rl_notes_run", "config.json", "job.json", "log.txt"]
    (run / "state.json").write_text("{}"); (run / "done.json").write_text("{}"); rd.prepare("overwrite")
    assert (run / "state.json").exists() and not (run / "config.json").exists()          # state.json is no name a run writes: kept

def test_run_dir_layout_lock_and_metrics(tmp_path):
    rd = RunDir(tmp_path / "r")
    names = {"config": rd.config_file, "metrics": rd.metrics.path, "ckpt": rd.ckpt, "done": rd.done_file, "log": rd.log_file,
             "job": rd.job_file, "lock": rd.lock.path, "weights": rd.weights(), "critic": rd.weights("critic")}
    assert {k: str(v.relative_to(rd.path)) for k, v in names.items()} == {
        "config": "config.json", "metrics": "metrics.jsonl", "ckpt": "ckpt", "done": "done.json", "log": "log.txt", "job": "job.json",
        "lock": ".lock", "weights": "ckpt/policy.safetensors", "critic": "ckpt/critic.safetensors"}
    assert RunDir(tmp_path, lock=".lab.lock").lock.path == tmp_path / ".lab.lock"
    with rd.open("fresh"):
        assert rd.lock.owner()["pid"] == os.getpid()
        with pytest.raises(CheckpointError, match="is in use by process"): RunDir(rd.path).open("resume")
        rd.begin([], config={"a": 1})
        for s in range(3): rd.append({"step": s})
    assert not rd.lock.path.exists()
    assert json.loads(rd.config_file.read_text()) == {"a": 1} and rd.metrics.read() == [{"step": s} for s in range(3)]
    with open(rd.metrics.path, "a") as f: f.write('{"step": 3, "lo')                    # killed mid-append
    with pytest.warns(UserWarning, match="partial last line"): RunDir(rd.path).append({"step": 3})   # the next process's first append
    assert [r["step"] for r in rd.metrics.read()] == [0, 1, 2, 3]
    with pytest.raises(CheckpointError, match="holds a previous run"): rd.open("fresh")
    assert not rd.lock.path.exists()                                                     # a failed open releases the lock
    assert rd.done() is None; rd.mark_done({"steps": 3}); assert rd.done() == {"steps": 3}

def test_run_dir_resume_protocol(tmp_path):
    "save at step 2, rows up to 3 (a kill after the row of step 3): resume gives the checkpoint and rows 0..2; a killed swap is recovered."
    cfg = {"lr": 1e-2}
    with RunDir(tmp_path / "r").open("fresh") as rd:
        net, opt = _toy(0); rd.begin([], cfg)
        for s in range(4): rd.append({"step": s})
        rd.save(2, cfg, None, net, opt)
    assert rd.state()["step"] == 2 and rd.has_checkpoint()
    os.replace(rd.ckpt, rd.path / "ckpt.old")                                             # killed between the swap's renames
    with pytest.warns(UserWarning, match="recovered"):
        with RunDir(rd.path).open("resume") as rd2:
            net2, opt2 = _toy(1)
            st, rows = rd2.resume(cfg, None, net2, opt2)
    assert st["step"] == 2 and [r["step"] for r in rows] == [0, 1, 2]
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), net2.parameters()))
    with pytest.raises(CheckpointError, match="different configuration"): rd.resume({"lr": 0.1}, None, *_toy())
    rd.metrics.rewrite([{"step": 0}])
    with pytest.raises(CheckpointError, match="lacks the rows up to step 2"): rd.resume(cfg, None, *_toy())


# ---------------------------------------------------------------- the checkpoint swap and its recovery
from rl_notes.checkpoint import (save_checkpoint, load_checkpoint, read_state, recover_dir, begin_dir, seal_dir, commit_dir,
                                 verify_dir, complete_dir, CKPT_VERSION)

def _toy(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    for _ in range(2): net(torch.randn(5, 4)).pow(2).mean().backward(); opt.step(); opt.zero_grad()
    return net, opt

def _die_after_first_replace(monkeypatch):
    real, calls = os.replace, []
    def replace(a, b):
        if calls: raise KeyboardInterrupt("killed between the two renames")
        calls.append((a, b)); real(a, b)
    monkeypatch.setattr(os, "replace", replace)
    return calls

CFG = {"lr": 0.01, "steps": 9, "shard_rollouts": True}

@pytest.mark.parametrize("use_accelerate", [False, True])
def test_rl_checkpoint_kill_between_renames(tmp_path, monkeypatch, use_accelerate):
    acc = None
    if use_accelerate:
        from accelerate import Accelerator
        acc = Accelerator(cpu=True)
    ck = tmp_path / "ckpt"
    net, opt = _toy()
    save_checkpoint(ck, 2, CFG, acc, net, opt)
    net(torch.randn(3, 4)).sum().backward(); opt.step()
    calls = _die_after_first_replace(monkeypatch)
    with pytest.raises(KeyboardInterrupt): save_checkpoint(ck, 4, CFG, acc, net, opt)
    monkeypatch.undo()
    assert [Path(a).name for a, _ in calls] == ["ckpt"]                                   # ckpt -> ckpt.old happened
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.old", "ckpt.tmp"]           # no ckpt/ on disk
    net2, opt2 = _toy(1)
    with pytest.warns(UserWarning, match="recovered"): st = load_checkpoint(ck, CFG, acc, net2, opt2)
    assert st["step"] == 4                                                                   # the newer complete copy
    for a, b in zip(net.parameters(), net2.parameters()): assert torch.equal(a, b)
    save_checkpoint(ck, 6, CFG, acc, net, opt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]

def test_rl_checkpoint_recovers_old_when_new_is_incomplete(tmp_path):
    ck = tmp_path / "ckpt"; net, opt = _toy()
    save_checkpoint(ck, 2, CFG, None, net, opt)
    os.replace(ck, tmp_path / "ckpt.old")                                                    # the first rename, by hand
    (tmp_path / "ckpt.tmp").mkdir(); (tmp_path / "ckpt.tmp" / "policy.safetensors").write_bytes(b"half")  # killed mid-write
    with pytest.warns(UserWarning, match="from ckpt.old"): assert read_state(ck)["step"] == 2
    save_checkpoint(ck, 3, CFG, None, net, opt)                                               # the next save cleans up
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"] and read_state(ck)["step"] == 3

def test_rl_checkpoint_damage_is_a_clear_error(tmp_path):
    ck = tmp_path / "ckpt"; net, opt = _toy()
    save_checkpoint(ck, 2, CFG, None, net, opt)
    st = json.loads((ck / "state.json").read_text())
    assert st["version"] == CKPT_VERSION == 1 and sorted(st["files"]) == ["optim_policy.safetensors", "policy.safetensors", "rng_0.json"]
    good = (ck / "policy.safetensors").read_bytes()
    (ck / "policy.safetensors").write_bytes(good[:-64] + os.urandom(64))                      # random bytes, same size
    with pytest.raises(CheckpointError, match=r"cannot read policy .*policy.safetensors \(corrupt"): load_checkpoint(ck, CFG, None, *_toy())
    (ck / "policy.safetensors").write_bytes(good)
    (ck / "optim_policy.safetensors").write_bytes(b"\0" * 10)
    with pytest.raises(CheckpointError, match="cannot read policy"): load_checkpoint(ck, CFG, None, *_toy())
    save_checkpoint(ck, 2, CFG, None, net, opt)
    (ck / "rng_0.json").write_text('{"python": [3, [1, 2')
    with pytest.raises(CheckpointError, match="RNG"): load_checkpoint(ck, CFG, None, *_toy())
    save_checkpoint(ck, 2, CFG, None, net, opt)
    with pytest.raises(CheckpointError, match="different configuration: lr"): load_checkpoint(ck, {**CFG, "lr": 1.0}, None, *_toy())
    with pytest.raises(CheckpointError, match="written by 1 process"):
        class Two: is_main_process, process_index, num_processes = True, 0, 2
        load_checkpoint(ck, CFG, Two(), *_toy())
    (ck / "policy.safetensors").unlink()
    with pytest.raises(CheckpointError, match="lacks policy.safetensors"): load_checkpoint(ck, CFG, None, *_toy())

@pytest.mark.parametrize("patch,msg", [
    ({"step": -3}, "field `step` must be an int >= 0, got -3"),
    ({"step": "3"}, "field `step` must be an int >= 0, got '3'"),
    ({"step": 2.0}, "field `step` must be an int >= 0, got 2.0"),
    ({"world_size": 0}, "field `world_size` must be an int >= 1, got 0"),
    ({"world_size": None}, "field `world_size` must be an int >= 1, got None"),
    ({"config": "x"}, "field `config` must be a dict, got 'x'"),
    ({"version": 2}, "not a version-1 rl_notes checkpoint"),
    ({"version": None}, "not a version-1 rl_notes checkpoint"),
])
def test_state_json_is_validated(tmp_path, patch, msg):
    ck = tmp_path / "ckpt"; net, opt = _toy()
    save_checkpoint(ck, 2, CFG, None, net, opt)
    st = json.loads((ck / "state.json").read_text()); st.update(patch); (ck / "state.json").write_text(json.dumps(st))
    with pytest.raises(CheckpointError) as e: load_checkpoint(ck, CFG, None, *_toy())
    assert msg in str(e.value) and "state.json" in str(e.value)

def test_state_json_missing_field_and_garbage(tmp_path):
    ck = tmp_path / "ckpt"; net, opt = _toy(); save_checkpoint(ck, 2, CFG, None, net, opt)
    st = json.loads((ck / "state.json").read_text()); del st["world_size"]; (ck / "state.json").write_text(json.dumps(st))
    with pytest.raises(CheckpointError, match="field `world_size` is missing"): read_state(ck)
    (ck / "state.json").write_bytes(os.urandom(50))
    with pytest.raises(CheckpointError, match="corrupt"): read_state(ck)
    (ck / "state.json").write_text("[1]")
    with pytest.raises(CheckpointError, match="not a JSON object"): read_state(ck)

def test_no_message_suggests_deleting_a_complete_checkpoint(tmp_path, monkeypatch):
    ck = tmp_path / "ckpt"; net, opt = _toy(); save_checkpoint(ck, 2, CFG, None, net, opt)
    _die_after_first_replace(monkeypatch)
    with pytest.raises(KeyboardInterrupt): save_checkpoint(ck, 3, CFG, None, net, opt)
    monkeypatch.undo()
    with pytest.warns(UserWarning): assert recover_dir(ck)                                # recovered, nothing to delete
    assert complete_dir(ck) and verify_dir(ck)["step"] == 3

def test_generic_swap(tmp_path):
    X = tmp_path / "x"
    for v in range(3):
        tmp = begin_dir(X); (tmp / "sub").mkdir(); (tmp / "sub" / "a.txt").write_text(str(v)); seal_dir(tmp, {"v": v}); commit_dir(X)
    assert verify_dir(X) == {"v": 2, "files": {"sub/a.txt": verify_dir(X)["files"]["sub/a.txt"]}}
    (X / "sub" / "a.txt").write_text("9")
    with pytest.raises(CheckpointError, match=r"sub/a.txt \(corrupt"): verify_dir(X)


def test_a_checkpoint_names_only_files_inside_it(tmp_path):
    "A state.json that names an absolute path, a path through .. or a link: refused as damaged, the named file never read."
    from rl_notes.checkpoint import bad_files
    (tmp_path / "ck").mkdir(); (tmp_path / "outside").write_text("x"); (tmp_path / "ck" / "link").symlink_to(tmp_path / "outside")
    for name in (str(tmp_path / "outside"), "../outside", "link"):
        bad = bad_files(tmp_path / "ck", {"files": {name: "0" * 64}})
        assert bad == [f"{name} (not a file inside the directory: never read)"], bad
