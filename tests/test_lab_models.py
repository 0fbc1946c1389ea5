"Tests of the RL lab's tokenizer, model loading, SFT cache, tasks and rollouts (fast: tiny models, a few steps)."
import json, os, random
import pytest
import torch
from hypothesis import given, settings, strategies as st
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rl_notes.tasks import get_task, parse_expression
from rl_notes.trainconfig import CHARS
from rl_notes.models import build_tokenizer, tiny_llama, load_model
from rl_notes.sft import SFTConfig
from rl_notes.lab import sft_warm_start
from rl_notes.rollout import generate, response_logprobs, cat_rollouts, evaluate

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tok(): return build_tokenizer()


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tok):
    "A tiny checkpoint written with save_pretrained (model + tokenizer)."
    d = tmp_path_factory.mktemp("tiny")
    m = tiny_llama(tok, hidden_size=32, num_layers=1, heads=2, seed=3)
    m.save_pretrained(d); tok.save_pretrained(d)
    return d, m


@given(st.text(alphabet=CHARS, min_size=0, max_size=40))
@settings(max_examples=200, deadline=None)
def test_tokenizer_round_trip(s):
    tok = build_tokenizer()
    ids = tok(s)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(s) + 1   # one token per character
    assert tok.decode(ids, skip_special_tokens=True) == s


def test_tokenizer_save_load(tmp_path, tok):
    tok.save_pretrained(tmp_path)
    tok2 = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(tok2, PreTrainedTokenizerFast)
    batch = ["347+285=", "1+2=", "(3+5)*7"]
    assert tok2(batch, padding=True)["input_ids"] == tok(batch, padding=True)["input_ids"]
    assert (tok2.pad_token_id, tok2.bos_token_id, tok2.eos_token_id, tok2.padding_side) == (0, 1, 2, "left")
    assert tok2.get_vocab() == tok.get_vocab()


def test_load_model_saved_checkpoint(saved):
    d, m = saved
    m2, tok2 = load_model(d)
    ids = torch.tensor([tok2("12+34=")["input_ids"]])
    with torch.no_grad(): torch.testing.assert_close(m2(ids).logits, m(ids).logits)
    assert tok2.padding_side == "left" and not m2.training
    assert (d / "model.safetensors").exists()


def test_load_model_str_path_and_generate(saved):
    d, _ = saved
    m2, tok2 = load_model(str(d))
    ro = generate(m2, tok2, ["1+2=", "33+44="], group_size=2, max_new_tokens=5, seed=0)
    assert ro.input_ids.shape[0] == 4 and ro.response_mask.shape[1] <= 5


@pytest.mark.parametrize("kind", ["missing", "file", "empty", "no_weights", "bad_config"])
def test_load_model_bad_path(tmp_path, saved, kind):
    if kind == "missing": p, msg = tmp_path / "nope", "does not exist"
    elif kind == "file":
        p = tmp_path / "f.txt"; p.write_text("x"); msg = "is not a directory"
    elif kind == "empty": p, msg = tmp_path, "no config.json"
    elif kind == "no_weights":
        p = tmp_path / "w"; p.mkdir(); (p / "config.json").write_text((saved[0] / "config.json").read_text())
        msg = "could not load a causal LM"
    else:
        p = tmp_path / "c"; p.mkdir(); (p / "config.json").write_text("{not json")
        msg = "could not load a causal LM"
    with pytest.raises(ValueError, match=msg): load_model(p)


def test_sft_cache_and_determinism(tmp_path):
    task = get_task("addition", min_digits=1, max_digits=2)
    kw = dict(model_cfg=dict(hidden_size=32, num_layers=1, heads=2), steps=3, batch_size=8, n_train=50, eval_n=8,
              target_accuracy=1.0, eval_every=1, val_n=8)
    p1 = sft_warm_start(task, SFTConfig(**kw), cache_dir=tmp_path / "a", progress=False)
    info = json.loads((p1 / "sft_config.json").read_text())
    assert len(info["loss"]) == 3 and "accuracy" in info["eval"]
    assert [s for s, _ in info["val_accuracy"]] == [1, 2, 3] and info["stopped_at"] == 3   # target never reached
    mtime = (p1 / "model.safetensors").stat().st_mtime_ns
    assert sft_warm_start(task, SFTConfig(**kw), cache_dir=tmp_path / "a", progress=False) == p1             # cache hit: same dir
    assert (p1 / "model.safetensors").stat().st_mtime_ns == mtime                  # not rewritten
    p2 = sft_warm_start(task, SFTConfig(**kw), cache_dir=tmp_path / "b", progress=False)                      # fresh dir: same weights
    m1, _ = load_model(p1); m2, _ = load_model(p2)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    p3 = sft_warm_start(task, SFTConfig(**{**kw, "steps": 4}), cache_dir=tmp_path / "a", progress=False)     # other config: other dir
    assert p3 != p1
    assert not [q for q in (tmp_path / "a").iterdir() if q.name.endswith((".tmp", ".old"))]
    with pytest.raises(ValueError, match="SFTConfig.steps must be an int >= 1, got 0"): sft_warm_start(task, SFTConfig(**{**kw, "steps": 0}), cache_dir=tmp_path)
    with pytest.raises(ValueError, match="SFTConfig.target_accuracy"): sft_warm_start(task, SFTConfig(**{**kw, "target_accuracy": 1.5}), cache_dir=tmp_path)
    with pytest.raises(ValueError, match="SFTConfig.lr must be a finite float > 0, got inf"): sft_warm_start(task, SFTConfig(**{**kw, "lr": float("inf")}), cache_dir=tmp_path)


@given(st.integers(0, 10**6), st.integers(0, 10**6))
@settings(max_examples=100, deadline=None)
def test_addition_demo_verifies(a, b):
    t = get_task("addition", min_digits=1, max_digits=7)
    ex = {"a": a, "b": b, "answer": str(a + b)}
    assert t.verify(ex, t.demonstration(ex)) == (1.0, True)
    assert t.verify(ex, t.demonstration({"a": a, "b": b + 1})) == (0.0, True)


def test_splits_disjoint():
    for name, kw in [("addition", dict(min_digits=1, max_digits=3)), ("countdown", {})]:
        t = get_task(name, **kw)
        tr, te = t.splits(2000, 300, seed=5)
        assert not set(tr["prompt"]) & set(te["prompt"])
        assert t.dataset(50, seed=5, split="test")["prompt"] == t.dataset(50, seed=5, split="test")["prompt"]


def test_countdown_parser_matches_eval():
    rng = random.Random(1)
    def rnd(d):
        if d == 0 or rng.random() < 0.3: return str(rng.randint(0, 30))
        e = f"{rnd(d-1)}{rng.choice('+-*')}{rnd(d-1)}"
        return f"({e})" if rng.random() < 0.5 else e
    for _ in range(300):
        e = rnd(4)
        assert parse_expression(e)[0] == eval(e)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 5), st.data())
def test_countdown_attempts_verifier(seed, attempts, data):
    "With `attempts`, a closed response earns 1 iff one of its expressions alone would; a response without its closing `=` earns 0."
    t, single = get_task("countdown", attempts=attempts), get_task("countdown")
    row = t.dataset(1, seed=seed, split="test")[0]
    demo = t.demonstration(row)
    parts = demo[:-1].split(",")
    assert 1 <= len(parts) <= attempts and len(demo) <= t.max_response_chars()
    picked = data.draw(st.lists(st.sampled_from(parts + ["1+1", "x", ""]), min_size=1, max_size=attempts))
    want = float(any(single.verify(row, e)[0] == 1 for e in picked))
    assert t.verify(row, ",".join(picked) + "=")[0] == want
    cut = data.draw(st.integers(0, len(demo) - 1))            # any proper prefix: cut by a budget, never closed
    assert t.verify(row, demo[:cut]) == (0.0, False)


def test_rollout_logprobs_consistent(tok):
    m = tiny_llama(tok, hidden_size=32, num_layers=2, heads=2, seed=0)
    ro = generate(m, tok, ["347+285=", "1+2=", "99+1="], group_size=3, max_new_tokens=10, temperature=0.8, seed=0)
    torch.testing.assert_close(response_logprobs(m, ro), ro.old_logp, atol=1e-5, rtol=0)
    L = ro.response_mask.sum(-1)
    has_eos = (ro.response_ids == tok.eos_token_id).any(-1)
    assert torch.equal(ro.truncated, ~has_eos)
    assert torch.equal(L[~ro.truncated], (ro.response_ids == tok.eos_token_id).float().argmax(-1)[~ro.truncated] + 1)
    both = cat_rollouts([ro, generate(m, tok, ["5+5="], 3, 4, temperature=0.8, seed=1)], tok.pad_token_id)
    torch.testing.assert_close(response_logprobs(m, both), both.old_logp, atol=1e-5, rtol=0)


def test_evaluate_keys(tok):
    m = tiny_llama(tok, hidden_size=32, num_layers=1, heads=2)
    t = get_task("countdown")
    res = evaluate(m, tok, t, t.dataset(10, split="test"), max_new_tokens=6)
    assert {"accuracy", "parsed_rate", "mean_len", "truncation_rate", "n"} <= set(res) and res["n"] == 10


# ---------------------------------------------------------------- the SFT cache: location, code version, kills, damage
SMALL = SFTConfig(model_cfg=dict(hidden_size=32, num_layers=1, heads=2), steps=3, batch_size=8, n_train=40, eval_n=0,
                  target_accuracy=None)

def test_sft_cache_default_location_and_behaviour_key(tmp_path, monkeypatch):
    from rl_notes.cache import cache_dir
    from rl_notes.fingerprint import behaviour_key
    from rl_notes.lab import sft_cache_path
    import shutil
    key = behaviour_key("sft")       # memoised under the default cache root: computed at most once per source version
    shutil.copytree(cache_dir("fingerprint"), tmp_path / "c" / "fingerprint")        # so the warm start below reads it
    monkeypatch.setenv("RL_NOTES_CACHE", str(tmp_path / "c"))
    task = get_task("addition", min_digits=1, max_digits=2)
    p = sft_warm_start(task, SMALL, progress=False)
    assert p.parent == cache_dir("sft") == tmp_path / "c" / "sft"
    info = json.loads((p / "sft_config.json").read_text())
    assert info["config"]["code"] == key and set(info["files"]) >= {"model.safetensors", "config.json"}
    # code that trains differently is another entry: its results are not reused
    import rl_notes.lab as lab
    monkeypatch.setattr(lab, "behaviour_key", lambda kind: "fp1-000000000000")
    assert sft_cache_path(task, SMALL) != p

@pytest.mark.parametrize("leftover", [".old", ".tmp"])
def test_sft_cache_kill_between_renames(tmp_path, leftover):
    task = get_task("addition", min_digits=1, max_digits=2)
    p = sft_warm_start(task, SMALL, cache_dir=tmp_path, progress=False)
    mtime = (p / "model.safetensors").stat().st_mtime_ns
    os.replace(p, p.with_name(p.name + leftover))                   # the swap's first rename happened, the second did not
    with pytest.warns(UserWarning, match="recovered"): assert sft_warm_start(task, SMALL, cache_dir=tmp_path, progress=False) == p
    assert (p / "model.safetensors").stat().st_mtime_ns == mtime     # recovered, not retrained

def test_sft_cache_kill_inside_commit(tmp_path, monkeypatch):
    "A retrain over a damaged entry killed between the two os.replace calls of the swap: the next call recovers."
    import rl_notes.lab as lab
    task = get_task("addition", min_digits=1, max_digits=2)
    p = sft_warm_start(task, SMALL, cache_dir=tmp_path, progress=False)
    good = (p / "model.safetensors").read_bytes()
    (p / "model.safetensors").write_bytes(good[:-8] + os.urandom(8))   # damaged: not trusted, trained again
    real, calls = os.replace, []
    def replace(a, b):
        if calls: raise KeyboardInterrupt("killed")
        calls.append(a); real(a, b)
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt): sft_warm_start(task, SMALL, cache_dir=tmp_path, progress=False)
    monkeypatch.undo()
    assert not p.exists()
    trained = []
    monkeypatch.setattr(lab, "sft_train", lambda *a, **k: trained.append(1))
    with pytest.warns(UserWarning, match="recovered"): assert sft_warm_start(task, SMALL, cache_dir=tmp_path, progress=False) == p
    assert not trained and (p / "model.safetensors").read_bytes() == good


# ---------------------------------------------------------------- never run code from a model directory
def _plant_remote_code(d, saved_dir, model_type, marker):
    import shutil
    shutil.copytree(saved_dir, d)
    c = json.loads((d / "config.json").read_text())
    c.update(model_type=model_type, auto_map={"AutoConfig": "evil.Cfg", "AutoModelForCausalLM": "evil.Model",
                                             "AutoModelForSequenceClassification": "evil.Model"})
    (d / "config.json").write_text(json.dumps(c))
    t = json.loads((d / "tokenizer_config.json").read_text()); t["auto_map"] = {"AutoTokenizer": ["evil.Tok", None]}
    (d / "tokenizer_config.json").write_text(json.dumps(t))
    (d / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                               "from transformers import LlamaConfig as Cfg, LlamaForCausalLM as Model, PreTrainedTokenizerFast as Tok\n")

def _plant_pickle(d, saved_dir, marker):
    import pickle
    class Evil:
        def __reduce__(self): return (exec, (f"open({str(marker)!r}, 'w').write('ran')",))
    d.mkdir(); (d / "config.json").write_text((saved_dir / "config.json").read_text())
    (d / "pytorch_model.bin").write_bytes(pickle.dumps({"model.embed_tokens.weight": Evil()}))

def test_remote_code_is_never_run(tmp_path, saved):
    import subprocess, sys
    marker = tmp_path / "MARKER"
    _plant_remote_code(tmp_path / "native", saved[0], "llama", marker)
    _plant_remote_code(tmp_path / "foreign", saved[0], "evil-llama", marker)
    m, tok2 = load_model(tmp_path / "native")                            # transformers' own Llama, the .py ignored
    assert type(m).__name__ == "LlamaForCausalLM" and isinstance(tok2, PreTrainedTokenizerFast)
    with pytest.raises(ValueError, match="could not load a causal LM .*custom code"): load_model(tmp_path / "foreign")
    # `echo y | ...`: an answer on stdin changes nothing (no interactive prompt is ever shown)
    r = subprocess.run([sys.executable, "-c", "import sys\nfrom rl_notes.models import load_model\n"
                        "try: load_model(sys.argv[1])\nexcept ValueError as e: print('refused:', e)", str(tmp_path / "foreign")],
                       input="y\ny\n", capture_output=True, text=True, timeout=300)
    assert "refused: could not load a causal LM" in r.stdout and "[y/N]" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert not marker.exists()

def test_pickle_weights_are_refused(tmp_path, saved):
    from rl_notes.models import load_reward_model
    marker = tmp_path / "MARKER"
    _plant_pickle(tmp_path / "bin", saved[0], marker)
    with pytest.raises(ValueError) as e: load_model(tmp_path / "bin")
    assert str(e.value) == f"model `path` {str(tmp_path / 'bin')!r} has only pickle weights (pytorch_model.bin); rl_notes loads safetensors only"
    with pytest.raises(ValueError) as e: load_reward_model(str(tmp_path / "bin"))
    assert "TrainConfig.critic_init" in str(e.value) and "has only pickle weights (pytorch_model.bin)" in str(e.value)
    assert "\n" not in str(e.value)
    _plant_remote_code(tmp_path / "rm_foreign", saved[0], "evil-llama", marker)
    with pytest.raises(ValueError, match="TrainConfig.critic_init .*(cannot load a reward model|is a causal LM)"):   # refused before any code runs
        load_reward_model(str(tmp_path / "rm_foreign"))
    assert not marker.exists()


# ---------------------------------------------------------------- lab_runs: cache root, code version, lock, resume of a dead run
@pytest.mark.many_runs
def test_lab_runs_cache_and_resume(tmp_path, monkeypatch):
    import subprocess, sys, shutil
    from rl_notes.lab import lab_runs, lab_key, lab_done, LAB_LOCK
    from rl_notes.trainconfig import TrainConfig
    from rl_notes.cache import cache_dir
    from rl_notes.rundir import RunLock
    from rl_notes.fingerprint import behaviour_key
    key = behaviour_key("rl")        # memoised under the default cache root: computed at most once per source version
    shutil.copytree(cache_dir("fingerprint"), tmp_path / "cache" / "fingerprint")    # so the runs below read it, not recompute it
    monkeypatch.setenv("RL_NOTES_CACHE", str(tmp_path / "cache"))
    micro = str(sft_warm_start("addition", SFTConfig(model_cfg=dict(hidden_size=32, num_layers=1, heads=2), steps=20, batch_size=16, eval_n=0,
                                                     n_train=200, target_accuracy=None), progress=False, max_digits=2, scratchpad=False))
    kw = dict(model=micro, algo="grpo", task_kw=dict(max_digits=2, scratchpad=False), steps=3, n_prompts=2, group_size=2,
              max_new_tokens=3, n_train=50, n_eval=0, save_every=1)
    cfg = TrainConfig(**kw)
    (rows,) = lab_runs([cfg], workers=1)
    out = cache_dir("lab") / lab_key(cfg)
    assert cfg.out_dir == str(out) and [r["step"] for r in rows if "phase" not in r] == [0, 1, 2, 3]
    done = json.loads((out / "done.json").read_text())
    assert done["code"] == key == behaviour_key("rl") and lab_done(out) and not (out / LAB_LOCK).exists()
    log_size = (out / "log.txt").stat().st_size
    assert lab_runs([TrainConfig(**kw)], workers=1) == [rows] and (out / "log.txt").stat().st_size == log_size   # cached: no process ran
    # a run whose owner died after its step-2 checkpoint: the next lab_runs resumes it and ends with the same rows
    (out / "done.json").unlink()
    job = json.loads((out / "job.json").read_text())
    subprocess.run([sys.executable, "-c", "import json, sys\nfrom rl_notes.trainer import TrainConfig, train\n"
                    "train(TrainConfig.from_dict({**json.load(open(sys.argv[1]))['cfg'], 'stop_at': 2, 'save_every': 2, 'overwrite': True}))", str(out / "job.json")],
                   check=True, capture_output=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"]); dead.wait()
    (out / LAB_LOCK).write_text(json.dumps({"pid": dead.pid, "host": __import__("socket").gethostname(), "time": 0}))   # a stale lock
    (rows2,) = lab_runs([TrainConfig(**kw)], workers=1)
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time")} for r in rs]
    assert strip(rows2) == strip(rows) and json.loads((out / "done.json").read_text())["resumed"] is True
    assert job["cfg"]["threads"] == 1
