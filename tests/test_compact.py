"""Compacted generation (`generate(compact=True)`, `TrainConfig.compact_generation`): finished responses leave the sampler's
batch and KV cache, every row still draws its random numbers, so the samples are the same and the log-probs agree to float
order; the trainer's runs with and without it match, and the run key ignores it (run control)."""
import pytest
import torch
from rl_notes.lab import lab_key
from rl_notes.models import build_tokenizer, tiny_llama
from rl_notes.rollout import generate, response_logprobs
from rl_notes.trainconfig import RUN_CONTROL, TrainConfig, get_algo
from rl_notes.trainer import train


@pytest.mark.parametrize("seed,top_p,temperature", [(0, 1.0, 1.0), (1, 0.9, 0.7), (2, 1.0, 1.5)])
def test_compact_generate_same_draws(seed, top_p, temperature):
    tok = build_tokenizer(); model = tiny_llama(tok, seed=0)
    prompts = ["347+285=", "12+3=", "9999+1=", "5+5="]
    a = generate(model, tok, prompts, group_size=8, max_new_tokens=16, seed=seed, top_p=top_p, temperature=temperature)
    b = generate(model, tok, prompts, group_size=8, max_new_tokens=16, seed=seed, top_p=top_p, temperature=temperature, compact=True)
    assert a.lengths.float().std() > 0                     # rows end at different steps: compaction had rows to drop
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.response_mask, b.response_mask)
    assert torch.equal(a.truncated, b.truncated) and a.response_text == b.response_text
    torch.testing.assert_close(b.old_logp, a.old_logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(response_logprobs(model, b, temperature), b.old_logp, atol=1e-5, rtol=0)   # the recorded log-probs are the policy's


def test_compact_needs_dynamic_cache():
    tok = build_tokenizer(); model = tiny_llama(tok, seed=0)
    with pytest.raises(ValueError, match="cache='dynamic'"): generate(model, tok, ["1+1="], 2, 4, cache="static", compact=True)


@pytest.fixture(scope="module")
def learnt(tmp_path_factory):
    from rl_notes.fingerprint import micro_model
    return str(micro_model(tmp_path_factory.mktemp("learnt")))


def test_trainer_compact_generation(learnt, tmp_path):
    kw = dict(model=learnt, algo=get_algo("grpo", beta=0.0), task_kw=dict(max_digits=1, scratchpad=False), steps=3, n_prompts=4, group_size=4,
              max_new_tokens=8, lr=1e-3, n_train=60, n_eval=0, progress=False, threads=1)
    a = train(TrainConfig(out_dir=str(tmp_path / "plain"), **kw))
    b = train(TrainConfig(out_dir=str(tmp_path / "compact"), compact_generation=True, **kw))
    for ra, rb in zip(a[1:], b[1:]):
        for k in ("resp_len", "acc", "loss", "grad_norm", "entropy"):
            assert ra[k] == pytest.approx(rb[k], rel=1e-3, abs=1e-5), (k, ra[k], rb[k])
    assert "compact_generation" in RUN_CONTROL
    assert lab_key(TrainConfig(out_dir="x", **kw)) == lab_key(TrainConfig(out_dir="x", compact_generation=True, **kw))
