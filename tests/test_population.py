"""The population path (`rl_notes.population`): members of one design trained together compute what single runs compute
(metric rows to float order over these short runs), a member that fails leaves without stopping the others,
`lab_runs(population=P)` caches each member under its own lab key, apart from the single run's (done.json says which path
made it), and designs the path does not batch are refused."""
from pathlib import Path

import pytest

from rl_notes.fingerprint import MICRO_RUN, TASK_KW
from rl_notes.population import train_population, population_problem
from rl_notes.trainconfig import TrainConfig, get_algo
from rl_notes.trainer import train


def cfgs(micro, root, seeds=(0, 1, 2), algo=None, **kw):
    return [TrainConfig(model=micro, algo=algo or get_algo("grpo", beta=0.0), task=TASK_KW["add1"][0], task_kw=TASK_KW["add1"][1], seed=s,
                        out_dir=str(Path(root) / f"s{s}"), **{**MICRO_RUN, "steps": 4, **kw}) for s in seeds]


def worst(a, b) -> float:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    return max((abs(x[k] - y[k]) for x, y in zip(a, b) for k in x
                if not k.startswith("time") and isinstance(x[k], (int, float)) and x[k] is not None and y.get(k) is not None), default=0.0)


@pytest.mark.parametrize("algo", [get_algo("grpo", beta=0.0), get_algo("dapo"), get_algo("ppo"), get_algo("vapo", value_pretrain_steps=2)],
                         ids=["grpo", "dapo", "ppo", "vapo"])
def test_members_compute_what_single_runs_compute(micro_sft, tmp_path, algo):
    alone = [train(c) for c in cfgs(micro_sft, tmp_path / "alone", algo=algo)]
    pop = train_population(cfgs(micro_sft, tmp_path / "pop", algo=algo))
    assert all(not isinstance(r, BaseException) for r in pop), pop
    # VAPO's value pre-training and length-adaptive lambda amplify the float order of the batched passes most
    assert max(worst(list(a), list(b)) for a, b in zip(alone, pop)) < (1e-3 if algo.name == "vapo" else 1e-4)
    for s in (0, 1, 2):   # the checkpoints hold the member's own weights
        from safetensors.torch import load_file
        a = load_file(tmp_path / "alone" / f"s{s}" / "model" / "model.safetensors")
        b = load_file(tmp_path / "pop" / f"s{s}" / "model" / "model.safetensors")
        assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4
        if algo.uses_critic:   # and the critic's: its weights and AdamW moments in the member's own checkpoint
            for f in ("critic.safetensors", "optim_critic.safetensors"):
                ca, cb = (load_file(tmp_path / w / f"s{s}" / "ckpt" / f) for w in ("alone", "pop"))
                assert ca.keys() == cb.keys() and max((ca[k] - cb[k]).abs().max().item() for k in ca) < 1e-4


@pytest.mark.parametrize("algo", [get_algo("ppo"), get_algo("vapo", value_pretrain_steps=2)], ids=["ppo", "vapo"])
def test_a_population_of_one_is_its_single_run(micro_sft, tmp_path, algo):
    "One member: no padding to other members' widths, so the stacked passes (the critic's too) compute the single run's numbers."
    alone = train(cfgs(micro_sft, tmp_path / "alone", seeds=(0,), algo=algo)[0])
    pop = train_population(cfgs(micro_sft, tmp_path / "pop", seeds=(0,), algo=algo))[0]
    assert worst(list(alone), list(pop)) < 1e-5


def test_a_failing_member_leaves_the_others_running(micro_sft, tmp_path, monkeypatch):
    import rl_notes.trainer as T
    real = T.collect
    def collect(run, step, mt):
        if run.cfg.seed == 1 and step == 2: raise ValueError("a reward that failed for seed 1")
        return real(run, step, mt)
    monkeypatch.setattr(T, "collect", collect)
    pop = train_population(cfgs(micro_sft, tmp_path / "pop"))
    assert isinstance(pop[1], ValueError) and "seed 1" in str(pop[1])
    assert [len(pop[k]) for k in (0, 2)] == [5, 5]
    monkeypatch.setattr(T, "collect", real)
    alone = train(cfgs(micro_sft, tmp_path / "alone", seeds=(2,))[0])
    assert worst(list(alone), list(pop[2])) < 1e-4


@pytest.mark.parametrize("algo", [get_algo("grpo", beta=0.0), get_algo("ppo")], ids=["grpo", "ppo"])
def test_lab_runs_population_caches_each_member(micro_sft, tmp_path, algo):
    from rl_notes.lab import lab_runs, lab_key
    from rl_notes.rundir import RunDir
    mk = lambda *a, **kw: cfgs(*a, algo=algo, **kw)
    c = mk(micro_sft, tmp_path)
    assert lab_key(c[0], population=True) != lab_key(c[0])   # a population member is keyed apart from its single run
    rows = lab_runs(c, root=str(tmp_path / "cache"), population=3, workers=1)
    dones = [RunDir(cf.out_dir).done() for cf in c]
    assert [d["path"] for d in dones] == ["population of 3"] * 3 and all(len(r) == 5 for r in rows)
    again = lab_runs(mk(micro_sft, tmp_path), root=str(tmp_path / "cache"), population=3, workers=1)   # cached: nothing re-run
    assert again == rows and [RunDir(cf.out_dir).done() for cf in c] == dones
    one = mk(micro_sft, tmp_path, seeds=(1,))
    single = lab_runs(one, root=str(tmp_path / "single"), workers=1)[0]          # one run per process: no `path` in done.json
    assert worst(single, rows[1]) < 1e-4 and "path" not in RunDir(one[0].out_dir).done()


def test_what_the_population_does_not_batch_is_refused(micro_sft, tmp_path):
    assert population_problem(cfgs(micro_sft, tmp_path, algo=get_algo("ppo"))) is None     # a critic is stacked like the policy
    assert "a KL reference" in population_problem(cfgs(micro_sft, tmp_path, algo=get_algo("ppo", beta=0.05)))
    assert "micro-batches" in population_problem(cfgs(micro_sft, tmp_path, micro_batch_size=2))
    c = cfgs(micro_sft, tmp_path)
    import dataclasses
    assert "differ in ['lr']" in population_problem([c[0], dataclasses.replace(c[1], lr=1e-3)])
    with pytest.raises(ValueError, match="resumes alone"):
        train_population([dataclasses.replace(x, resume=True) for x in c])
