"""The stale-data corrections in the trainer: DPPO as a policy loss (`Algo(loss="dppo")`) and M2PO as a token modifier
(`Algo(m2po_threshold=...)`), on a sampler that lags the learner (`sampler_lag`): they train, log their own metrics,
resume exactly, and reduce to what they claim at their limits."""
import math
import pytest
from rl_notes.trainconfig import TrainConfig, get_algo, Algo
from rl_notes.trainer import train


@pytest.fixture(scope="module")
def learnt(tmp_path_factory):
    from rl_notes.fingerprint import micro_model
    return str(micro_model(tmp_path_factory.mktemp("learnt")))


def base(learnt, **kw):
    return dict(model=learnt, task_kw=dict(max_digits=1, scratchpad=False), steps=4, n_prompts=4, group_size=4, max_new_tokens=5,
                lr=3e-3, n_train=60, n_eval=0, progress=False, threads=1, sampler_lag=2, **kw)


@pytest.mark.parametrize("kind", ["binary_tv", "binary_kl"])
def test_dppo_trains_on_a_lagging_sampler(learnt, tmp_path, kind):
    algo = get_algo("grpo", beta=0.0, loss="dppo", clip_anchor="sampler", dppo_kind=kind, dppo_delta_low=0.01, dppo_delta_high=0.01)
    rows = train(TrainConfig(algo=algo, out_dir=str(tmp_path / kind), **base(learnt)))
    shares = [r["dppo/dppo_masked"] for r in rows[1:] if r.get("dppo/dppo_masked") is not None]
    assert len(shares) == 4 and all(0.0 <= s <= 1.0 for s in shares) and all(math.isfinite(r["loss"]) for r in rows[1:])
    assert max(shares) > 0                                                                  # tight bounds on a lagging sampler: some tokens masked


def test_dppo_with_open_bounds_is_reinforce_with_the_ratio(learnt, tmp_path):
    "Bounds no probability can cross (a move is at most 1): nothing masked, every step."
    algo = get_algo("grpo", beta=0.0, loss="dppo", clip_anchor="sampler", dppo_delta_low=1.0, dppo_delta_high=1.0)
    rows = train(TrainConfig(algo=algo, out_dir=str(tmp_path / "open"), **base(learnt)))
    assert all(r["dppo/dppo_masked"] == 0.0 for r in rows[1:] if r.get("dppo/dppo_masked") is not None)


def test_m2po_masks_the_largest_gaps_and_resumes_exactly(learnt, tmp_path):
    algo = get_algo("grpo", beta=0.0, m2po_threshold=1e-4)
    kw = base(learnt, save_every=2)
    full = train(TrainConfig(algo=algo, out_dir=str(tmp_path / "full"), **kw))
    masked = [r["m2po/m2po_masked"] for r in full[1:] if r.get("m2po/m2po_masked") is not None]
    assert masked and max(masked) > 0 and all(r["m2po/m2po_m2_kept"] <= 1e-4 + 1e-9 for r in full[1:] if r.get("m2po/m2po_m2_kept") is not None)
    cut = train(TrainConfig(algo=algo, out_dir=str(tmp_path / "cut"), **{**kw, "steps": 2}))
    resumed = train(TrainConfig(algo=algo, out_dir=str(tmp_path / "cut"), resume=True, **kw))
    strip = lambda r: {k: v for k, v in r.items() if not k.startswith("time")}
    assert [strip(r) for r in resumed] == [strip(r) for r in full] and len(cut) == 3


def test_settings_are_checked():
    with pytest.raises(ValueError, match="Algo.dppo_kind"): Algo(dppo_kind="tv")
    with pytest.raises(ValueError, match="Algo.m2po_threshold"): Algo(m2po_threshold=-1.0)
    with pytest.raises(ValueError, match="Algo.dppo_delta_low"): Algo(dppo_delta_low=-0.1)
