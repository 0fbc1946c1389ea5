"Behaviour fingerprints: a pure refactor keeps the key, a planted change of behaviour changes it, a field no micro run sets is reported, rows are bit-reproducible across processes."
import dataclasses, json, subprocess, sys
import pytest, torch
from rl_notes import algo as algo_tables, trainer, fingerprint as fpm
from rl_notes.fingerprint import (fingerprint, rows_key, behaviour_key, fingerprint_memo, coverage, inert, micro_model, RL_RUNS,
                                  NOT_BEHAVIOUR, KINDS, OFFPOLICY_RUNS, rl_config_kw)
from rl_notes.trainconfig import offpolicy_settings
from rl_notes.trainconfig import Algo, TrainConfig, PRESETS, RUN_CONTROL

RUNS = ["grpo", "ppo"]  # the subset the tests compute: a group estimator with the clipped loss, and GAE with a critic


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    "The micro model (80 SFT steps, a few seconds), made once for the module."
    return micro_model(tmp_path_factory.mktemp("fp") / "micro")


@pytest.fixture(scope="module")
def base(micro):
    return fingerprint("rl", RUNS, micro=micro)


def _with(table, name, fn, micro, runs=RUNS):
    "The rows of `runs` with `table[name]` replaced by `fn`."
    orig = table[name]
    table[name] = fn
    try: return fingerprint("rl", runs, micro=micro)
    finally: table[name] = orig


def test_rows_are_exact_and_exercise_the_loss(base):
    steps = [r for r in base["grpo"] if r.get("step", 0) > 0]
    assert len(steps) == 2 and any(r["clipfrac"] > 0 for r in steps) and all(r["grad_norm"] > 0 for r in steps)
    assert all(not k.startswith("time") for rs in base.values() for r in rs for k in r)
    assert json.loads(json.dumps(base)) == base                      # floats survive the JSON the key hashes


def test_pure_refactor_keeps_the_key(micro, base):
    clip, gae = trainer.POLICY_LOSSES["clip"], algo_tables.ADVANTAGE_ESTIMATORS["gae"]
    def loss(algo, *a, **kw): return clip(algo, *a, **kw)                         # other code, the same numbers
    assert rows_key(_with(trainer.POLICY_LOSSES, "clip", loss, micro)) == rows_key(base)
    def adv(algo, batch, reduce=None):
        a, r = gae(algo, batch, reduce)
        return a.clone(), r.clone()
    assert rows_key(_with(algo_tables.ADVANTAGE_ESTIMATORS, "gae", adv, micro)) == rows_key(base)


def test_planted_change_of_behaviour_changes_the_key(micro, base):
    clip = trainer.POLICY_LOSSES["clip"]
    def wider(algo, *a, **kw): return clip(dataclasses.replace(algo, eps_high=algo.eps_high + 0.05), *a, **kw)   # one flag's effect
    got = _with(trainer.POLICY_LOSSES, "clip", wider, micro, ["grpo"])
    assert rows_key(got) != rows_key({"grpo": base["grpo"]})
    gae = algo_tables.ADVANTAGE_ESTIMATORS["gae"]
    def lam(algo, batch, reduce=None): return gae(dataclasses.replace(algo, lam_actor=0.9), batch, reduce)       # an estimator's lambda
    got = _with(algo_tables.ADVANTAGE_ESTIMATORS, "gae", lam, micro, ["ppo"])
    assert rows_key(got) != rows_key({"ppo": base["ppo"]})


def test_memo_is_keyed_by_source_and_the_key_by_rows(micro, tmp_path, monkeypatch):
    monkeypatch.setenv("RL_NOTES_CACHE", str(tmp_path))
    k1 = behaviour_key("eval", runs=["add1"], micro=micro)
    assert len(list((tmp_path / "fingerprint").glob("*.json"))) == 1
    assert behaviour_key("eval", runs=["add1"], micro=micro) == k1                  # read back, not recomputed
    monkeypatch.setattr(fpm, "code_version", lambda *roots: "0.0.0+an-edited-source")
    assert behaviour_key("eval", runs=["add1"], micro=micro) == k1                  # a new source, the same rows: the same key
    assert len(list((tmp_path / "fingerprint").glob("*.json"))) == 2
    memo = fingerprint_memo("eval", runs=["add1"], micro=micro)
    assert memo["code"] == "0.0.0+an-edited-source" and set(memo["rows"]) == {"add1"}


def test_rows_are_bit_identical_in_another_process(base):
    code = "from rl_notes.fingerprint import fingerprint, rows_key; print(rows_key(fingerprint('rl', ['grpo'])))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == rows_key({"grpo": base["grpo"]})          # its own micro model, the same rows


def test_coverage_reports_every_gap_with_a_reason():
    cov = coverage()
    assert cov["presets_missing"] == [] and set(cov["tasks_missing"]) == {"math"}
    assert [f for f, why in cov["uncovered"].items() if why == "no micro run sets it"] == []
    assert {f.split(".")[1] for f in cov["uncovered"]} <= set(NOT_BEHAVIOUR)
    # a new flag that no micro run sets is reported, not silently uncovered
    @dataclasses.dataclass
    class AlgoPlus(Algo): new_flag: bool = False
    runs = {k: (t, AlgoPlus(**dataclasses.asdict(a)), kw) for k, (t, a, kw) in RL_RUNS.items()}
    assert coverage(runs, algo_cls=AlgoPlus)["uncovered"]["Algo.new_flag"] == "no micro run sets it"
    # and a preset without a micro run
    assert coverage({k: v for k, v in {**RL_RUNS, **OFFPOLICY_RUNS}.items() if k != "gspo"})["presets_missing"] == ["gspo"]
    # the off-policy fields are exercised by their own kind's runs only, so the rl kind's key did not change when they came
    assert not any(offpolicy_settings(rl_config_kw(n)) for n in RL_RUNS) 
    assert [n for n in OFFPOLICY_RUNS if not offpolicy_settings(rl_config_kw(n))] == ["grpo_tis"]   # grpo + tis, a field the rl runs exercise


def test_inert_and_bad_input():
    assert inert({"a": [{"x": 1.0}], "b": [{"x": 1.0}], "c": [{"x": 2.0}]}) == [["a", "b"]]
    with pytest.raises(ValueError, match="`kind` must be one of"): fingerprint("nope")
    with pytest.raises(ValueError, match=r"no rl micro run\(s\) \['nope'\]"): fingerprint("rl", ["nope"])
    with pytest.raises(ValueError, match="`kinds`: give at least one"): behaviour_key()
    assert set(KINDS) == {"rl", "offpolicy", "sft", "eval"}


def test_sft_and_eval_kinds(micro):
    "The SFT rows end with a weight digest (the micro model's own SFT among them); both kinds are reproducible."
    sft = fingerprint("sft", ["micro", "add1"], micro=micro)
    assert set(sft["micro"][0]) == {"micro"} and "weights" in sft["add1"][-1] and len(sft["add1"][0]["loss"]) == 3
    assert fingerprint("sft", ["micro", "add1"], micro=micro) == sft
    ev = fingerprint("eval", ["add1"], micro=micro)
    assert ev["add1"][0]["k"] == 4 and "seconds" not in json.dumps(ev)


def test_sft_key_replaces_only_the_source_version(tmp_path, monkeypatch):
    "The SFT cache key (rl_notes.lab.sft_key) is the SFT run's configuration plus the SFT loop's behaviour key."
    from rl_notes.sft import SFTConfig, sft_config
    from rl_notes.tasks import get_task
    from rl_notes.lab import sft_key
    monkeypatch.setenv("RL_NOTES_CACHE", str(tmp_path))
    task, cfg = get_task("addition", max_digits=2), SFTConfig(steps=5)
    assert sft_key(task, cfg) == {**sft_config(task, cfg), "code": behaviour_key("sft")}
