"""rl_notes.doctor: the readers (rl_notes, TRL, verl, CSV/JSONL exports; malformed, empty and partial logs), each finding
on small synthetic series (present, borderline, absent), the report, the dashboard and the command line.

verl cannot run here: its reader is tested on a log that this file writes in the format of verl's file logger
(`verl.utils.tracking.FileLogger`: one `{"step": N, "data": {...}}` object per line, newer versions add
`"elapsed_seconds"`), with metric names from verl's `metric_utils.compute_data_metrics`, the actor's `update_policy`
and `process_validation_metrics`. The TRL reader is tested on a synthetic `trainer_state.json` and on a real one that
TRL 1.16's `GRPOTrainer` writes for a tiny random Llama on CPU (`test_real_trl_run`).
"""
import json, os, subprocess, sys
from pathlib import Path

import numpy as np
import pytest
from conftest import trl_grpo_script

from rl_notes.doctor import DoctorError, Report, _run_checks, diagnose, format_report, dashboard, main, read_log, to_series, T

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def ramp(a, b, n=40, noise=0.0, seed=0):
    return a + (b - a) * np.linspace(0, 1, n) + noise * np.random.default_rng(seed).standard_normal(n)


def series(**metrics):
    return {k: (np.arange(1.0, len(v) + 1), np.asarray(v, float)) for k, v in metrics.items()}


def found(s):
    return sorted(f"{f.key}:{f.status}" for f in _run_checks(s)[0])


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---- readers

def test_rl_notes_run(tmp_path):
    rows = [{"step": 0, "algo": "dapo", "heldout_acc": 0.1}, {"step": 0, "phase": "value_pretrain", "vp_step": 1, "value_loss": 1.0}]
    rows += [{"step": i, "reward": 0.1 * i, "acc": 0.1 * i, "entropy": 1.0, "resp_len": 5.0, "trunc_rate": 0.0, "kept_frac": 0.75,
              "kl_ref": None, "explained_var": 0.3, "time_step": 0.1, "rewards/correctness": 0.2} for i in range(1, 6)]
    write_jsonl(tmp_path / "metrics.jsonl", rows)
    (tmp_path / "config.json").write_text(json.dumps({"algo": {"dynamic_sampling": True}}))
    r = diagnose(tmp_path)
    assert r.source == "rl_notes" and r.n_steps == 6 and r.steps == (0.0, 5.0)
    assert r.series["zero_std_frac"][1].tolist() == [0.25] * 5            # 1 - kept_frac, dynamic sampling on
    assert r.series["len_mean"][1].tolist() == [5.0] * 5 and "kl_ref" not in r.series   # None is a missing point
    assert r.series["heldout_acc"][0].tolist() == [0.0]                     # the value pre-training row is skipped
    assert r.unused == ["rewards/correctness", "time_step"] and r.unmapped == []   # rl_notes names no check needs
    rows = [{"step": i, "acc": 0.5, "kept_frac": 0.4, "resp_len": 5.0} for i in range(1, 11)]
    (tmp_path / "ds").mkdir()
    write_jsonl(tmp_path / "ds" / "metrics.jsonl", rows)
    (tmp_path / "ds" / "config.json").write_text(json.dumps({"algo": {"dynamic_sampling": True}}))
    (f,) = [f for f in diagnose(tmp_path / "ds").findings if f.key == "zero_std"]
    assert f.status == "present" and "this run uses dynamic sampling" in f.evidence   # the run filters these groups already
    assert diagnose(tmp_path / "ds").path == str(tmp_path / "ds" / "metrics.jsonl")
    (tmp_path / "config.json").write_text(json.dumps({"algo": {"dynamic_sampling": False}}))
    r = diagnose(tmp_path / "metrics.jsonl")
    assert "zero_std_frac" not in r.series and "kept_frac" in r.unused     # without dynamic sampling kept_frac is always 1


def _trl_history(n=10):
    hist = []
    for i in range(1, n + 1):
        hist.append({"clip_ratio/high_max": 0.0, "clip_ratio/high_mean": 0.01, "clip_ratio/low_mean": 0.002, "clip_ratio/low_min": 0.0,
                     "clip_ratio/region_mean": 0.012, "completions/clipped_ratio": 0.1, "completions/mean_length": 20.0 + i,
                     "completions/mean_terminated_length": 18.0, "entropy": 1.0 - 0.01 * i, "epoch": i / n,
                     "frac_reward_zero_std": 0.25, "grad_norm": 0.5, "kl": 0.001 * i, "learning_rate": 1e-6, "loss": 0.001,
                     "reward": 0.2 + 0.01 * i, "reward_std": 0.3, "rewards/acc/mean": 0.2, "step": i})
        if i % 5 == 0: hist.append({"eval_loss": 0.0, "eval_reward": 0.3, "epoch": i / n, "step": i})
    hist.append({"epoch": 1.0, "step": n, "total_flos": 0.0, "train_loss": 0.001, "train_runtime": 3.0})
    return hist


def test_trl_trainer_state(tmp_path):
    (tmp_path / "checkpoint-5").mkdir(); (tmp_path / "checkpoint-10").mkdir()
    (tmp_path / "checkpoint-5" / "trainer_state.json").write_text(json.dumps({"log_history": _trl_history(5)}))
    (tmp_path / "checkpoint-10" / "trainer_state.json").write_text(json.dumps({"global_step": 10, "log_history": _trl_history(10)}))
    r = diagnose(tmp_path)                                                 # the latest checkpoint (10 > 5, not by string order)
    assert r.source == "trl" and r.path.endswith("checkpoint-10/trainer_state.json") and r.n_steps == 10
    assert r.series["heldout_reward"][0].tolist() == [5.0, 10.0]            # eval_ rows merge by step
    for k in ("reward", "reward_std", "zero_std_frac", "entropy", "clipfrac", "clipfrac_low", "clipfrac_high", "len_mean",
              "len_terminated", "trunc_frac", "kl_ref", "loss", "grad_norm", "lr"):
        assert k in r.series, k
    assert {"clip_ratio/low_min", "train_runtime", "eval_loss"} <= set(r.unused) and r.unmapped == []
    assert r.series["reward_fn/acc"][1].tolist() == [0.2] * 10                 # rewards/<f>/mean: one series per reward function


def test_verl_file_logger(tmp_path):
    "A log in verl's documented file-logger format (written here: verl does not run on this machine)."
    rows = []
    for i in range(1, 11):
        d = {"actor/entropy": 1.0, "actor/pg_clipfrac": 0.02, "actor/pg_clipfrac_lower": 0.001, "actor/ppo_kl": 1e-4,
             "actor/pg_loss": 0.01, "actor/grad_norm": 0.4, "actor/lr": 1e-6, "actor/kl_loss": 0.001 * i,
             "response_length/mean": 100.0, "response_length/clip_ratio": 0.05, "critic/score/mean": 0.1 * i,
             "critic/vf_explained_var": 0.5, "mismatch/kl": 1e-5, "timing_s/gen": 3.0, "my_reward/mean": 1.0}
        if i % 5 == 0: d.update({"val-core/gsm8k/acc/mean@1": 0.3, "val-core/math/acc/mean@1": 0.5,
                                 "val-core/gsm8k/acc/best@4/mean": 0.6, "val-aux/gsm8k/reward/mean@1": 0.3})
        rows.append({"step": i, "data": d} if i < 5 else {"step": i, "elapsed_seconds": 2.0 * i, "data": d})
    write_jsonl(tmp_path / "verl.jsonl", rows)
    r = diagnose(tmp_path / "verl.jsonl")
    assert r.source == "verl" and r.n_steps == 10
    assert r.series["dualclip_frac"][1][0] == 0.001 and r.series["clipfrac"][1][0] == 0.02   # lower = the dual clip in verl
    assert r.series["heldout_acc"][1].tolist() == [0.4, 0.4]               # mean over the data sources
    assert r.series["heldout_pass_k"][1].tolist() == [0.6, 0.6]
    assert r.series["kl_ref"][1][-1] == pytest.approx(0.01) and "mismatch_kl" in r.series and "explained_var" in r.series
    assert r.unused == ["timing_s/gen", "val-aux/gsm8k/reward/mean@1"] and r.unmapped == ["my_reward/mean"]
    assert "clip_asymmetry" in r.skipped                                  # verl logs no low/high split


def test_csv_and_jsonl_exports_with_a_mapping(tmp_path):
    lines = ["global_step,ent,reward,note"] + [f"{i},{1.0 - 0.02 * i},{0.1 * i}," for i in range(1, 11)]
    (tmp_path / "w.csv").write_text("\n".join(lines) + "\n")
    r = diagnose(tmp_path / "w.csv", mapping={"global_step": "step", "ent": "entropy"})
    assert r.source == "csv" and r.series["entropy"][0].tolist() == list(map(float, range(1, 11))) and "reward" in r.series
    write_jsonl(tmp_path / "w.jsonl", [{"it": i, "policy_entropy": 1.0, "len": 3} for i in range(4)])
    r = diagnose(tmp_path / "w.jsonl", mapping={"it": "step", "policy_entropy": "entropy"})
    assert r.source == "csv" and r.series["entropy"][0].tolist() == [0.0, 1.0, 2.0, 3.0] and r.unmapped == ["len"]
    r = diagnose([{"step": i, "entropy": 1.0} for i in range(3)])       # rows in memory
    assert r.path == "<rows>" and r.metrics == ["entropy"]


def test_read_log_and_to_series(tmp_path):
    write_jsonl(tmp_path / "metrics.jsonl", [{"step": 1, "data": {"actor/entropy": 1.0}}])   # verl writing to metrics.jsonl
    src, rows, f = read_log(tmp_path)
    assert (src, rows, f.name) == ("verl", [{"step": 1, "actor/entropy": 1.0}], "metrics.jsonl")
    s, names = to_series([{"step": 3, "reward": 0.5, "kl": 0.1}], "trl", mapping={"reward": "acc"})   # the user's mapping wins
    assert sorted(s) == ["acc", "kl_ref"] and names == []


@pytest.mark.parametrize("name,text,msg", [
    ("metrics.jsonl", "", "metrics.jsonl: no metric rows"),
    ("metrics.jsonl", "\n\n", "metrics.jsonl: no metric rows"),
    ("metrics.jsonl", '{"step": 1, "reward": 1}\n{"step": 2, "rew', "metrics.jsonl:2: the last line is cut off"),
    ("metrics.jsonl", '{"step": 1}\n{oops}\n{"step": 3}\n', "metrics.jsonl:2: not JSON"),
    ("metrics.jsonl", '{"step": 1}\n[1, 2]\n', "metrics.jsonl:2: expected a JSON object"),
    ("trainer_state.json", '{"global_step": 3}', "trainer_state.json: no `log_history`"),
    ("trainer_state.json", '{"log_history": []}', "`log_history` is empty"),
    ("trainer_state.json", '{"log_history": [{"step": 1, "loss"', "trainer_state.json:1: not JSON"),
    ("trainer_state.json", '{"log_history": [3]}', "log_history[0] is not an object"),
    ("x.csv", "", "x.csv: no header line"),
    ("x.csv", "step,reward\n", "x.csv: a header but no metric rows"),
    ("x.csv", "step,reward\n1,0.5\n2\n", "x.csv:3: 1 cells, the header has 2"),
    ("v.jsonl", '{"step": 1, "data": {"actor/entropy": 1}}\n{"step": 2, "data": {"actor/entropy": 1}\n', "v.jsonl:2: not JSON"),
    ("x.jsonl", '{"foo": 1}\n', "no known metric in 1 rows (unmapped names: foo)"),
])
def test_unreadable_logs_are_one_clear_error(tmp_path, name, text, msg):
    (tmp_path / name).write_text(text)
    with pytest.raises(DoctorError, match=None) as e: diagnose(tmp_path / name)
    assert msg in str(e.value) and "\n" not in str(e.value) and name in str(e.value)


def test_other_bad_inputs(tmp_path):
    with pytest.raises(DoctorError, match="no such file"): diagnose(tmp_path / "missing")
    with pytest.raises(DoctorError, match="no metrics.jsonl, trainer_state.json"): diagnose(tmp_path)
    write_jsonl(tmp_path / "v.jsonl", [{"step": 1, "data": {}}, {"step": 2, "x": 1}])
    with pytest.raises(DoctorError, match=r"v.jsonl:2: a verl file-logger row"): diagnose(tmp_path / "v.jsonl", source="verl")
    with pytest.raises(DoctorError, match="unknown source 'wandb'"): diagnose(tmp_path / "v.jsonl", source="wandb")
    with pytest.raises(DoctorError, match="unknown internal name"): diagnose([{"step": 1}], mapping={"a": "entropie"})
    with pytest.raises(DoctorError, match="must be a path or a list of dicts"): diagnose(3)


# ---- findings: present, borderline, absent

CASES = {
    "entropy collapse": (dict(entropy=ramp(1.0, 0.1)), ["entropy_collapse:present"]),
    "entropy collapse borderline": (dict(entropy=ramp(1.0, 0.62)), ["entropy_collapse:borderline"]),
    "entropy healthy fall": (dict(entropy=ramp(1.0, 0.85, noise=0.02)), []),
    "entropy runaway": (dict(entropy=ramp(1.0, 3.0)), ["entropy_runaway:present"]),
    "entropy runaway borderline": (dict(entropy=ramp(1.0, 2.0)), ["entropy_runaway:borderline"]),
    "zero-std groups": (dict(zero_std_frac=ramp(0.4, 0.8)), ["zero_std:present"]),
    "zero-std borderline": (dict(zero_std_frac=ramp(0.3, 0.4)), ["zero_std:borderline"]),
    "zero-std absent": (dict(zero_std_frac=ramp(0.1, 0.2)), []),
    "truncation": (dict(trunc_frac=ramp(0.02, 0.3)), ["truncation:present"]),
    "truncation borderline": (dict(trunc_frac=ramp(0.12, 0.14)), ["truncation:borderline"]),
    "truncation absent": (dict(trunc_frac=ramp(0.02, 0.05)), []),
    "length growth": (dict(len_mean=ramp(40, 90)), ["length_drift:present"]),
    "length collapse": (dict(len_mean=ramp(90, 40)), ["length_drift:present"]),
    "length borderline": (dict(len_mean=ramp(40, 56)), ["length_drift:borderline"]),
    "length stable": (dict(len_mean=ramp(40, 44)), []),
    "value collapse": (dict(explained_var=ramp(-0.5, 0.1), len_mean=np.r_[ramp(40, 12, 14), ramp(12, 14, 26)]),
                       ["length_drift:present", "value_collapse:present"]),
    "length drop with a fit critic": (dict(explained_var=ramp(0.5, 0.8), len_mean=np.r_[ramp(40, 12, 14), ramp(12, 14, 26)]),
                                      ["length_drift:present"]),
    "clip high side": (dict(clipfrac_low=ramp(0.004, 0.004), clipfrac_high=ramp(0.03, 0.03)), ["clip_asymmetry:present"]),
    "clip low side borderline": (dict(clipfrac_low=ramp(0.025, 0.025), clipfrac_high=ramp(0.01, 0.01)), ["clip_asymmetry:borderline"]),
    "clip asymmetric but tiny": (dict(clipfrac_low=ramp(0.0005, 0.0005), clipfrac_high=ramp(0.005, 0.005)), []),
    "clip symmetric": (dict(clipfrac_low=ramp(0.004, 0.004), clipfrac_high=ramp(0.006, 0.006)), []),
    "kl accelerating": (dict(kl_ref=np.exp(ramp(np.log(1e-3), np.log(0.2)))), ["kl_growth:present"]),
    "kl levelling off": (dict(kl_ref=0.02 * np.sqrt(ramp(0, 1))), []),
    "kl growing but tiny": (dict(kl_ref=np.exp(ramp(np.log(1e-5), np.log(2e-3)))), []),
    "loss 0, gradient not": (dict(loss=ramp(0.003, -0.002), grad_norm=ramp(0.5, 0.4)), ["loss_zero:note"]),
    "loss 0, gradient 0": (dict(loss=ramp(0.0, 0.0), grad_norm=ramp(0.0, 0.0)), ["grad_norm:present", "loss_zero:present"]),
    "loss not 0": (dict(loss=ramp(0.3, 0.2)), []),
    "held-out flat": (dict(acc=ramp(0.2, 0.7), heldout_acc=ramp(0.3, 0.31, 5)), ["heldout_gap:present"]),
    "held-out lags": (dict(acc=ramp(0.2, 0.7), heldout_acc=ramp(0.3, 0.45, 5)), ["heldout_gap:borderline"]),
    "held-out follows": (dict(acc=ramp(0.2, 0.7), heldout_acc=ramp(0.3, 0.6, 5)), []),
    "held-out falls": (dict(heldout_acc=ramp(0.5, 0.0, 4)), ["heldout_drop:present"]),
    "held-out falls borderline": (dict(heldout_acc=ramp(0.5, 0.43, 4)), ["heldout_drop:borderline"]),
    "held-out dips within noise": (dict(heldout_acc=ramp(0.5, 0.47, 4)), []),
    "held-out rises": (dict(heldout_acc=ramp(0.5, 0.6, 4)), []),
    "small held-out reward falls by less than 20%": (dict(heldout_reward=ramp(2.0, 1.75, 4)), ["heldout_drop:borderline"]),
    "entropy gradual collapse, noisy": (dict(entropy=np.exp(ramp(np.log(0.8), np.log(0.15), noise=0.1))), ["entropy_collapse:present"]),
    "entropy jumps up at step 2": (dict(entropy=np.r_[0.13, 0.36, np.full(38, 0.89)]), ["entropy_runaway:present"]),
    "entropy falls at step 2": (dict(entropy=np.r_[0.9, 0.2, np.full(38, 0.15)]), ["entropy_collapse:present"]),
    "entropy one early spike": (dict(entropy=np.r_[0.5, 1.5, ramp(0.5, 0.5, 38, noise=0.02)]), []),
    "entropy noise only": (dict(entropy=ramp(0.5, 0.5, noise=0.1)), []),
    "kl high level, flat": (dict(kl_ref=np.r_[0.0, ramp(0.5, 0.55, 39, noise=0.02)]), ["kl_growth:present"]),
    "kl borderline level": (dict(kl_ref=ramp(0.12, 0.12, noise=0.005)), ["kl_growth:borderline"]),
    "kl low, levelling off": (dict(kl_ref=0.04 * np.sqrt(ramp(0, 1)) + ramp(0, 0, noise=0.002)), []),
    "kl low, still growing": (dict(kl_ref=ramp(0, 0.04, noise=0.002)), ["kl_growth:present"]),
    "grad NaN": (dict(grad_norm=np.r_[ramp(0.5, 0.6, 10), np.nan, np.nan]), ["grad_norm:present"]),
    "grad spikes": (dict(grad_norm=np.r_[ramp(0.5, 0.5, 20, noise=0.05), 20.0, 0.5, 30.0, 0.5, 25.0, ramp(0.5, 0.5, 15)]), ["grad_norm:present"]),
    "grad one spike": (dict(grad_norm=np.r_[ramp(0.5, 0.5, 20, noise=0.05), 20.0, ramp(0.5, 0.5, 19)]), ["grad_norm:borderline"]),
    "grad healthy": (dict(grad_norm=ramp(0.8, 0.3, noise=0.05)), []),
    "one reward dominates": (dict(**{"reward_fn/correct": ramp(0.0, 0.1), "reward_fn/format": ramp(0.9, 1.0)}), ["reward_share:present"]),
    "rewards balanced": (dict(**{"reward_fn/correct": ramp(0.2, 0.6), "reward_fn/format": ramp(0.5, 0.9)}), []),
    "mismatch": (dict(mismatch_logp=ramp(0.06, 0.08)), ["mismatch:present"]),
    "mismatch borderline": (dict(mismatch_logp=ramp(0.03, 0.03)), ["mismatch:borderline"]),
    "mismatch kl": (dict(mismatch_kl=ramp(0.002, 0.003)), ["mismatch:present"]),
    "no mismatch": (dict(mismatch_logp=ramp(0.001, 0.002)), []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_findings(case):
    metrics, want = CASES[case]
    assert found(series(**metrics)) == want


def test_finding_fields_and_pass_k():
    s = series(entropy=ramp(1.0, 0.1), heldout_pass_k=ramp(0.8, 0.6, 4))
    (f,), clean, skipped = _run_checks(s)
    assert f.window == (1, 40) and f.spans == [(1, 40)] and f.numbers["fit_ratio"] < T["entropy_collapse"][0] and f.confidence == "high"
    assert "pass@k 0.8 -> 0.6" in f.evidence and f.metrics == ["entropy", "heldout_pass_k"]
    assert "12_dapo" in f.section and any("eps_high" in k for k in f.knobs)
    assert skipped["mismatch"].startswith("not logged") and "truncation" in skipped


def test_too_few_points_is_said_not_passed():
    _, clean, skipped = _run_checks(series(entropy=ramp(1.0, 0.1, n=5)))
    assert skipped["entropy"] == "5 points, needs 8" and "entropy" not in clean


def test_heldout_drop_sees_a_break_in_the_first_steps():
    "A policy broken at step 2: every window check starts after the break; the held-out fall from step 0 names it."
    x = np.arange(0.0, 61.0)
    acc = np.r_[0.41, np.zeros(60)]; ent = np.r_[0.16, np.full(60, 0.72)]
    s = {"acc": (x[1:], acc[:60]), "entropy": (x[1:], ent[:60]), "heldout_acc": (np.array([0.0, 20, 40, 60]), np.array([0.53, 0, 0, 0]))}
    found_, clean, _ = _run_checks(s)
    f, e = sorted(found_, key=lambda f: f.key != "heldout_drop")
    assert f.key == "heldout_drop" and f.status == "present" and f.confidence == "high"
    assert e.key == "entropy_runaway" and e.status == "present" and e.numbers["jump_ratio"] == 4.5   # the early jump: 0.16 -> 0.72
    assert f.numbers["drop"] == 0.53 and "training acc 0.41 (step 1) -> median 0" in f.evidence and f.spans == [(0, 0), (60, 60)]
    assert f.metrics == ["heldout_acc", "acc"] and "33_trainer" in f.section
    ax = dashboard(Report("x", "csv", 61, (0, 60), sorted(s), [], [], [f], [], {}, s)).axes[0]
    assert len(ax.lines) == 2 + 2   # held-out and training accuracy, and the two one-point windows drawn as lines


def test_wrong_answers_growing_faster():
    s = series(len_mean=ramp(40, 80), len_right=ramp(40, 50), len_wrong=ramp(40, 100))
    (f,), _, _ = _run_checks(s)
    assert "wrong answers grow faster" in f.evidence and f.confidence == "high" and f.numbers["wrong_ratio"] > f.numbers["right_ratio"]


# ---- report, dashboard, command line

def _broken_rows(n=40):
    t = np.linspace(0, 1, n)
    return [{"step": i + 1, "entropy": 1.2 * np.exp(-3 * t[i]), "trunc_frac": 0.05 + 0.3 * t[i], "reward": 0.2 + 0.5 * t[i],
             "loss": 0.001, "grad_norm": 0.3, "mystery": 1} for i in range(n)]


def test_report_text_json_and_dashboard(tmp_path):
    r = diagnose(_broken_rows())
    text = format_report(r)
    assert text.splitlines()[1] == "FINDINGS: 2 present, 0 borderline, 1 note(s)" and "unknown names" in text and "mystery" in text
    assert len(text.splitlines()) < 25
    d = r.to_dict()
    assert json.loads(json.dumps(d)) == d and [f["key"] for f in d["findings"]] == ["entropy_collapse", "truncation", "loss_zero"]
    assert "series" not in d and d["skipped"]["kl_growth"] == "not logged: kl_ref"
    fig = dashboard(r, tmp_path / "d.png")
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG" and [a.get_title() for a in fig.axes if a.get_title()] == [
        "entropy collapse [present]", "answers cut by the length budget [present]", "loss near 0 (expected with centred advantages; the gradient is not 0) [note]"]
    assert len(fig.axes) == 4                                              # grad_norm (0.3) beside loss (0.001): a right-hand axis
    clean = diagnose([{"step": i, "entropy": 1.0, "reward": 0.5} for i in range(10)])
    assert clean.findings == [] and [a.get_title() for a in dashboard(clean).axes] == ["reward", "entropy"]       # an overview when nothing is found


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "rl_notes.doctor", *map(str, args)], capture_output=True, text=True, env=ENV, cwd=ROOT)


def test_cli(tmp_path):
    write_jsonl(tmp_path / "run.jsonl", _broken_rows())
    p = _cli(tmp_path / "run.jsonl", "--json", tmp_path / "r.json", "--png", tmp_path / "r.png", "--map", "mystery=lr")
    assert p.returncode == 0 and "entropy collapse" in p.stdout and p.stderr == ""
    assert json.loads((tmp_path / "r.json").read_text())["unmapped"] == [] and (tmp_path / "r.png").stat().st_size > 1000
    (tmp_path / "bad.jsonl").write_text('{"step": 1}\n{"st')
    for args, msg in [((tmp_path / "bad.jsonl",), "bad.jsonl:2: the last line is cut off"),
                      ((tmp_path / "nope",), "no such file or directory"),
                      ((tmp_path / "run.jsonl", "--map", "mystery"), "--map expects THEIRS=OURS pairs")]:
        p = _cli(*args)
        assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1 and p.stderr.startswith("rl_notes doctor: error: ")
        assert msg in p.stderr
    assert main([str(tmp_path / "run.jsonl")]) == 0
    p = _cli(tmp_path / "run.jsonl", "--map", "mystery=lr", "--json", "-", "--map", "reward=acc")   # --map repeats
    d = json.loads(p.stdout)                                                # --json -: JSON only on stdout
    assert p.returncode == 0 and "acc" in d["metrics"] and "lr" in d["metrics"] and "reward" not in d["metrics"]


def test_import_stays_light():
    "The command starts without torch or matplotlib (the dashboard imports matplotlib when it draws)."
    code = "import sys, rl_notes.doctor; assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], env=ENV, cwd=ROOT).returncode == 0


# ---- a real TRL run

@pytest.mark.slow   # about 40 s on a busy 2-core CPU, mostly importing trl/transformers in the subprocess: `-m "not slow"` skips it
def test_real_trl_run(tmp_path):
    "TRL 1.16's GRPOTrainer, 8 steps of a tiny random Llama on CPU, then the doctor on the trainer_state.json it saved."
    pytest.importorskip("trl")
    code = trl_grpo_script(tmp_path) + """
tr = GRPOTrainer(model=md, reward_funcs=digits, args=cfg, train_dataset=ds, processing_class=tok)
tr.train(); tr.save_state()
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**ENV, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    r = diagnose(tmp_path / "run")
    assert r.source == "trl" and r.n_steps == 8 and r.steps == (1.0, 8.0)
    for k in ("reward", "reward_std", "zero_std_frac", "entropy", "clipfrac", "clipfrac_low", "clipfrac_high", "kl_ref",
              "len_mean", "len_terminated", "trunc_frac", "loss", "grad_norm", "lr"):
        assert len(r.series[k][1]) == 8, k
    assert "reward_fn/digits" in r.series and r.unmapped == []   # every name TRL 1.16 logged is known; rewards/<f>/mean is read
    assert {"entropy", "truncation", "length_drift", "kl_growth", "zero_std", "clip_asymmetry", "loss_zero"} <= set(r.clean) | {f.key for f in r.findings}
    p = _cli(tmp_path / "run")
    assert p.returncode == 0 and p.stdout.startswith("rl_notes doctor: ") and "(trl), 8 steps (1-8)" in p.stdout


@pytest.mark.slow   # about 45 s on a busy 2-core CPU (the session's micro SFT start, then two 8-step runs): `-m "not slow"` skips it
@pytest.mark.many_runs
def test_real_rl_notes_runs(tmp_path, micro_sft):
    "rl_notes' own trainer (DAPO and PPO, 8 steps on the micro SFT model of conftest.py): every name it logs is mapped or known, and the doctor reads it."
    from rl_notes.trainconfig import TrainConfig, get_algo
    from rl_notes.trainer import train
    m = micro_sft
    for algo, kw in (("dapo", dict(cache_len=2)), ("ppo", {})):
        train(TrainConfig(model=m, algo=get_algo(algo, **kw), task_kw=dict(max_digits=2, scratchpad=False), steps=8, n_prompts=4,
                          group_size=4, max_new_tokens=3, n_train=500, n_eval=8, eval_every=4, save_every=100, progress=False,
                          threads=1, out_dir=str(tmp_path / algo)))
        r = diagnose(tmp_path / algo)
        assert r.source == "rl_notes" and r.n_steps == 9 and r.unmapped == [], r.unmapped
        for k in ("reward", "acc", "entropy", "clipfrac", "clipfrac_low", "clipfrac_high", "approx_kl", "len_mean", "trunc_frac",
                  "loss", "grad_norm", "lr", "heldout_acc"):
            assert k in r.series, (algo, k)
        assert "zero_std_frac" in r.series and ("explained_var" in r.series) == (algo == "ppo")   # dapo: kept_frac; ppo: frac_reward_zero_std
        assert r.series["heldout_acc"][0].tolist() == [0.0, 4.0, 8.0]
        trunc = next(f for f in r.findings if f.key == "truncation")        # a 3-token budget cuts answers: the doctor says so
        assert trunc.numbers["late"] >= T["trunc"][1]


def test_rl_notes_doctor_subcommand(tmp_path):
    "`rl_notes doctor` is the same command as `python -m rl_notes.doctor`: a report and exit 0, or one error line and 2."
    import subprocess, sys, json as _json
    run = tmp_path / "run"; run.mkdir()
    rows = [{"step": s, "reward": 0.5, "entropy": 1.0 - 0.01 * s, "loss": 0.0, "grad_norm": 1.0} for s in range(1, 41)]
    (run / "metrics.jsonl").write_text("".join(_json.dumps(r) + "\n" for r in rows))
    cmd = [sys.executable, "-c", "import sys; from rl_notes.cli import main; sys.exit(main(sys.argv[1:]))", "doctor"]
    ok = subprocess.run(cmd + [str(run), "--json", "-"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert '"findings"' in ok.stdout or "finding" in ok.stdout.lower()
    bad = subprocess.run(cmd + [str(tmp_path / "missing")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("rl_notes doctor: error:") and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


# ---- readers added: a trainer_state.json under any name, TensorBoard, W&B history; rl_notes' TRL-named metrics

def test_trainer_state_under_another_name(tmp_path):
    (tmp_path / "state_step10.json").write_text(json.dumps({"global_step": 10, "log_history": _trl_history(10)}))
    r = diagnose(tmp_path / "state_step10.json")                            # sniffed by content, not by name
    assert r.source == "trl" and r.n_steps == 10
    assert diagnose(tmp_path).path.endswith("state_step10.json")            # found in a directory too


def test_rl_notes_frac_reward_zero_std(tmp_path):
    "An rl_notes run logs TRL's frac_reward_zero_std: read as the zero-std share (no longer 'not logged')."
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "reward": 0.0, "resp_len": 3.0, "frac_reward_zero_std": 1.0,
                                                                  "grad_norm": 0.0}) + "\n" for i in range(1, 11)))
    r = diagnose(tmp_path)
    assert r.source == "rl_notes" and "zero_std" not in r.skipped
    assert {f.key for f in r.findings if f.status == "present"} >= {"zero_std", "grad_norm"}


def test_tensorboard_and_wandb_history(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(str(tmp_path / "tb"))
    for i in range(1, 11):
        for k, v in {"train/entropy": 1.0, "train/kl": 0.5, "train/reward": 0.1 * i, "train/frac_reward_zero_std": 0.1}.items(): w.add_scalar(k, v, i)
    w.close()
    r = diagnose(tmp_path / "tb")
    assert r.source == "trl" and r.n_steps == 10 and r.series["kl_ref"][1][0] == 0.5
    assert [f.key for f in r.findings if f.status == "present"] == ["kl_growth"]   # 0.5 nats/token: the level check
    (tmp_path / "wb" / "files").mkdir(parents=True)
    write_jsonl(tmp_path / "wb" / "files" / "wandb-history.jsonl",
                [{"_step": i, "_runtime": 1.0, "train/entropy": 2.0 - 0.15 * i, "train/global_step": i} for i in range(1, 11)])
    r = diagnose(tmp_path / "wb")
    assert r.n_steps == 10 and r.series["entropy"][1][-1] == 0.5 and r.findings[0].key == "entropy_collapse"


def test_dashboard_title_and_axis_labels(tmp_path):
    r = diagnose(_broken_rows())
    fig = dashboard(r)
    assert all(a.get_xlabel() == "training step" and a.get_ylabel() for a in fig.axes if a.get_title())
    assert fig.axes[0].get_ylabel() == "nats/token" and any(a.get_ylabel() == "L2 norm" for a in fig.axes)   # the twin axis labelled
    run = tmp_path / "0123456789abcdef"; run.mkdir()
    write_jsonl(run / "metrics.jsonl", [{**row, "resp_len": 3.0} for row in _broken_rows()])
    (run / "config.json").write_text(json.dumps({"algo": {"name": "grpo"}, "lr": 0.3, "seed": 2}))
    assert dashboard(diagnose(run))._suptitle.get_text().startswith("grpo run, lr 0.3, seed 2 (01234567) (rl_notes)")


def test_doctor_callback_is_a_trainer_callback_class():
    "DoctorCallback is a class (a transformers.TrainerCallback subclass) that a TRL user can subclass and check; importing the doctor loads no transformers."
    import subprocess, sys
    code = "import sys, rl_notes.doctor; assert 'transformers' not in sys.modules; print('ok')"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "ok"
    from transformers import TrainerCallback
    from rl_notes.doctor import DoctorCallback
    assert isinstance(DoctorCallback, type) and issubclass(DoctorCallback, TrainerCallback)
    class Mine(DoctorCallback): pass
    assert Mine(every=2).every == 2


def test_trls_importance_ratio_is_read_and_its_bias_found(tmp_path):
    "TRL's `sampling/importance_sampling_ratio/mean` (vLLM with its correction on) maps to `is_ratio`; a mean near 0.9 (a truncating sampler, a full-vocabulary learner) is a present finding, a mean near 1 none."
    import json
    from rl_notes.doctor import diagnose
    for mean, want in ((0.9, "present"), (1.0, None)):
        hist = [{"step": s, "loss": 0.1, "reward": 0.5, "sampling/importance_sampling_ratio/mean": mean + 0.001 * (s % 3)} for s in range(1, 21)]
        d = tmp_path / f"run{mean}"; d.mkdir()
        (d / "trainer_state.json").write_text(json.dumps({"log_history": hist}))
        got = {f.key: f.status for f in diagnose(d).findings}
        assert got.get("is_ratio_bias") == want, got


# ---- degenerate responses: empty answers and loops (rl_notes.responses), read from rl_notes' metrics and TRL's completion files
DEGENERATE = ROOT / "nbs" / "examples" / "doctor_degenerate"

def test_degenerate_responses_named_in_both_engines_committed_runs():
    from rl_notes.doctor import diagnose
    for run, source in (("rl_notes-brevity", "rl_notes"), ("trl-brevity", "trl")):
        r = diagnose(DEGENERATE / run)
        f = next((f for f in r.findings if f.key == "degenerate"), None)
        assert r.source == source and f is not None and f.status == "present", (run, [(x.key, x.status) for x in r.findings])
        assert f.title == "empty responses" and f.numbers["late"] >= 0.9 and "empty_frac" in f.metrics
    f = next(f for f in diagnose(DEGENERATE / "rl_notes-verbosity").findings if f.key == "degenerate")   # a reward for length at temperature 0.3
    assert f.status == "present" and f.title == "responses ending in a loop" and max(f.numbers["early"], f.numbers["late"]) >= 0.2


def test_trl_completion_files_become_rates(tmp_path):
    "TRL's completions_<step>.parquet (strings or conversations) read as one {step, empty_frac, loop_frac} row each."
    import pyarrow as pa, pyarrow.parquet as pq, shutil
    from rl_notes.runlogs import read_log, to_series
    run = tmp_path / "trl"; (run / "completions").mkdir(parents=True)
    shutil.copy(DEGENERATE / "trl-brevity" / "trainer_state.json", run / "trainer_state.json")
    conv = lambda t: [{"role": "assistant", "content": t}]
    pq.write_table(pa.table({"step": [1] * 4, "prompt": ["p"] * 4, "completion": ["", "42", "ab" * 12, "  "]}), run / "completions" / "completions_00001.parquet")
    pq.write_table(pa.table({"step": [2] * 2, "prompt": ["p"] * 2, "completion": [conv("7"), conv("")]}), run / "completions" / "completions_00002.parquet")
    source, rows, _ = read_log(run)
    s, _ = to_series(rows, source)
    assert source == "trl" and list(s["empty_frac"][1][:2]) == [0.5, 0.5] and list(s["loop_frac"][1][:2]) == [0.25, 0.0]


def test_a_healthy_run_has_no_degenerate_finding():
    "The committed healthy validation runs log no empty or looping shares: the check does not run, and never alarms."
    from rl_notes.doctor import check_degenerate
    import numpy as np
    steps = np.arange(1.0, 41.0)
    assert check_degenerate({"empty_frac": (steps, np.zeros(40)), "loop_frac": (steps, np.full(40, 0.02))}) is None


# ---- the engines users run: OpenRLHF, SkyRL, prime-rl, NeMo RL (their names restated from source; nbs/examples/engine_logs/make.py)
ENGINE_LOGS = ROOT / "nbs" / "examples" / "engine_logs"

@pytest.mark.parametrize("engine", ["openrlhf", "skyrl", "prime_rl", "nemo_rl"])
def test_each_engine_log_is_read_and_diagnosed(engine):
    from rl_notes.doctor import diagnose
    r = diagnose(ENGINE_LOGS / engine)
    assert r.source == engine and r.n_steps == 40 and r.unmapped == []                 # found from its names; every name known
    assert {"reward", "entropy", "grad_norm", "lr", "len_mean"} <= set(r.metrics)
    assert any(f.key == "entropy_collapse" and f.status == "present" for f in r.findings)  # the synthetic collapse, in each engine's names


def test_engine_names_are_not_read_as_trl():
    "transformers' train/ prefix is TRL's: NeMo RL's train/reward is not TRL's reward read through the prefix."
    from rl_notes.runlogs import read_log
    assert read_log(ENGINE_LOGS / "nemo_rl")[0] == "nemo_rl" and read_log(ENGINE_LOGS / "nemo_rl", source="nemo_rl")[1][0]["train/reward"] > 0


def test_cli_names_the_engines():
    p = _cli("--help"); text = " ".join(p.stdout.replace("-\n", "-").split())   # argparse wraps lines, at a hyphen too
    assert p.returncode == 0 and all(e in text for e in ("OpenRLHF", "SkyRL", "prime-rl", "NeMo RL", "openrlhf", "skyrl", "prime_rl", "nemo_rl"))
    p = _cli(ENGINE_LOGS / "skyrl", "--source", "skyrl")
    assert p.returncode == 0 and "entropy collapse" in p.stdout.lower()


def test_a_proxy_that_saturates_at_once_is_named():
    "The reward hacks of the committed validation set (the proxy saturates in a step or two) are named by the held-out check's level path, in TRL too; no control is."
    from rl_notes.doctor import diagnose
    v3 = ROOT / "nbs" / "examples" / "doctor_validation_v3"
    for seed in range(3):
        for run in (f"hack-s{seed}", f"hack-trl-s{seed}"):
            f = next((f for f in diagnose(v3 / run).findings if f.key == "heldout_gap"), None)
            assert f is not None and f.status == "present" and f.numbers["gap"] >= 0.3, run
    for ctrl in sorted(v3.glob("ctrl-*")):
        assert not any(f.key == "heldout_gap" for f in diagnose(ctrl).findings), ctrl.name


def test_a_plateau_is_reported_never_alarmed():
    "On the committed logs: a 120-step run whose reward rose and then flattened gets a borderline plateau; no control (30-60 steps) gets one."
    from rl_notes.doctor import diagnose
    v3 = ROOT / "nbs" / "examples" / "doctor_validation_v3"
    f = next(f for f in diagnose(v3 / "collapse-s1").findings if f.key == "plateau")
    assert f.status == "borderline" and f.numbers["first"] >= 0.1 and abs(f.numbers["second"]) <= 0.02
    for ctrl in sorted(v3.glob("ctrl-*")):
        assert not any(f.key == "plateau" for f in diagnose(ctrl).findings), ctrl.name


def test_held_out_set_meets_the_targets():
    "The held-out validation set (seeds 6-12, thresholds fixed before its runs; 42_doctor): >= 90% of the required labels found, <= 1 in 25 healthy runs alarmed."
    from rl_notes.doctor import diagnose
    v4 = ROOT / "nbs" / "examples" / "doctor_validation_v4"
    required = {"collapse": {"entropy_collapse"}, "collapse-trl": {"entropy_collapse"}, "kl": {"kl_growth"}, "kl-trl": {"kl_growth"},
                "blowup": {"entropy_runaway"}, "blowup-trl": {"entropy_runaway"}, "trunc": {"truncation"}, "trunc-trl": {"truncation"},
                "hard": {"zero_std"}, "hard-trl": {"zero_std"}, "easy": {"zero_std", "grad_norm"}, "easy-trl": {"zero_std", "grad_norm"},
                "gradnan-trl": {"grad_norm"}, "value": {"value_collapse"}, "hack": {"heldout_gap"}, "hack-trl": {"heldout_gap"}, "mismatch": {"mismatch"}}
    hits = total = alarmed = healthy = 0
    for d in sorted(v4.iterdir()):
        row = d.name.rsplit("-s", 1)[0]
        present = {f.key for f in diagnose(d).findings if f.status == "present"}
        if row.startswith("ctrl"): healthy += 1; alarmed += bool(present)
        else: total += len(required[row]); hits += len(required[row] & present)
    assert healthy >= 25 and total >= 50
    assert hits >= 0.9 * total and alarmed <= healthy / 25, (hits, total, alarmed, healthy)
