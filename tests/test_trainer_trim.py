"""Sorted, trimmed micro-batches (`TrainConfig.trim_micro_batches`): only padding is cut, so a step computes the same loss and
gradient as the untrimmed step, up to float order; the rows and the widths are checked directly."""
import pytest
import torch
from rl_notes.losses import Batch, micro_parts, take
from rl_notes.rollout import Rollout
from rl_notes.trainconfig import TrainConfig, get_algo
from rl_notes.trainer import train


def rollout(lengths, P=3, T=6):
    B = len(lengths)
    rm = torch.zeros(B, T, dtype=torch.bool)
    for i, L in enumerate(lengths): rm[i, :L] = True
    ids = torch.randint(3, 9, (B, P + T)) * torch.cat([torch.ones(B, P, dtype=torch.long), rm.long()], 1)
    att = torch.cat([torch.ones(B, P, dtype=torch.long), rm.long()], 1)
    return Rollout(ids, att, rm.long(), torch.randn(B, T) * rm, torch.zeros(B, dtype=torch.bool), [""] * B, P, 2)


def test_parts_and_trim():
    ro = rollout([2, 5, 1, 3])
    m = ro.response_mask.bool()
    b = Batch(ro, torch.zeros(4), torch.zeros(4), torch.zeros(4, dtype=torch.bool), m, m, 2, adv=torch.arange(4.0))
    assert [p.tolist() for p in micro_parts(m, 2)] == [[0, 1], [2, 3]]
    assert [p.tolist() for p in micro_parts(m, 2, by_length=True)] == [[2, 0], [3, 1]]      # lengths 1, 2 | 3, 5
    c = b.rows(torch.tensor([2, 0]), trim=True)
    assert c.mask.shape == (2, 2) and c.ro.input_ids.shape == (2, 3 + 2) and c.adv.tolist() == [2.0, 0.0]
    assert torch.equal(c.ro.old_logp, ro.old_logp[[2, 0], :2]) and torch.equal(take(ro.old_logp, [2, 0], 2), c.ro.old_logp)
    assert torch.equal(b.rows(torch.tensor([2, 0])).mask, m[[2, 0]])                            # untrimmed: the full width
    with pytest.raises(ValueError, match="longer than `width`"): ro.trim(3)


def test_trim_is_the_default():
    "On by default; without micro-batches there is nothing to sort or cut, so it is accepted and changes nothing."
    assert TrainConfig(model="m").trim_micro_batches and TrainConfig(model="m", micro_batch_size=4).trim_micro_batches
    assert not TrainConfig(model="m", trim_micro_batches=False).trim_micro_batches


@pytest.fixture(scope="module")
def learnt(tmp_path_factory):
    "The fingerprint's micro model (1-digit sums, learnt in 80 SFT steps): its groups' rewards differ, so the advantages do."
    from rl_notes.fingerprint import micro_model
    return str(micro_model(tmp_path_factory.mktemp("learnt")))


@pytest.mark.parametrize("algo", ["grpo", "dapo", "dr_grpo"])
def test_trimmed_step_is_the_untrimmed_step(learnt, tmp_path, algo):
    """Three steps, 2 minibatches of 8 rows in micro-batches of 3: with and without sorting and trimming, the same losses and
    weights to float order. Beta 0: with a KL term and all-equal rewards the true gradient is 0, and Adam would turn the
    float noise of either path into a full-size step."""
    kw = dict(model=learnt, algo=get_algo(algo, beta=0.0), task_kw=dict(max_digits=1, scratchpad=False), steps=3, n_prompts=4, group_size=4,
              max_new_tokens=5, n_minibatches=2, lr=1e-3, n_train=60, n_eval=0, progress=False, threads=1, micro_batch_size=3)
    a = train(TrainConfig(out_dir=str(tmp_path / "plain"), trim_micro_batches=False, **kw))
    b = train(TrainConfig(out_dir=str(tmp_path / "trim"), **kw))                             # the default: sorted and trimmed
    assert any(r["grad_norm"] > 0 for r in a[1:])                                             # a step that learns
    for ra, rb in zip(a[1:], b[1:]):
        for k in ("loss", "grad_norm", "entropy", "resp_len", "acc"):
            assert ra[k] == pytest.approx(rb[k], rel=1e-3, abs=1e-5), (k, ra[k], rb[k])
    from safetensors.torch import load_file
    wa, wb = (load_file(str(tmp_path / d / "model" / "model.safetensors")) for d in ("plain", "trim"))
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-4
