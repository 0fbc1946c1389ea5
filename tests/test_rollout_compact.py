"""The opt-in speed levers of the sampler and the log-prob pass. Compacted generation (`generate(compact=True)`, `TrainConfig.compact_generation`): finished responses leave the sampler's
batch and KV cache, every row still draws its random numbers, so the samples are the same and the log-probs agree to float
order; the shared prompt (`response_logprobs(share_prompt=True)`) gives the plain pass's values and gradients; the
trainer's runs with and without them match, and the run key ignores them (run control)."""
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
    a = train(TrainConfig(out_dir=str(tmp_path / "plain"), compact_generation=False, **kw))
    b = train(TrainConfig(out_dir=str(tmp_path / "compact"), compact_generation=True, **kw))
    for ra, rb in zip(a[1:], b[1:]):
        for k in ("resp_len", "acc", "loss", "grad_norm", "entropy"):
            assert ra[k] == pytest.approx(rb[k], rel=1e-3, abs=1e-5), (k, ra[k], rb[k])
    assert "compact_generation" in RUN_CONTROL
    assert lab_key(TrainConfig(out_dir="x", **kw)) == lab_key(TrainConfig(out_dir="x", compact_generation=True, **kw))


@pytest.mark.parametrize("group_size,T", [(4, 8), (1, 5), (3, 1)])
def test_shared_prompt_logprobs(group_size, T):
    "Each distinct prompt run once (`share_prompt=True`): log-probs, entropy and gradients as the plain pass, to float order."
    tok = build_tokenizer(); model = tiny_llama(tok, seed=0)
    ro = generate(model, tok, ["347+285=", "12+3=", "9999+1="], group_size=group_size, max_new_tokens=T, seed=3)
    out = {}
    for s in (False, True):
        model.zero_grad()
        lp, en = response_logprobs(model, ro, with_entropy=True, share_prompt=s)
        (lp.sum() + en.sum()).backward()
        out[s] = (lp.detach(), en.detach(), torch.cat([p.grad.flatten() for p in model.parameters()]))
    for a, b in zip(out[False], out[True]): torch.testing.assert_close(b, a, atol=1e-5 * max(1.0, float(a.abs().max())), rtol=0)


@pytest.mark.parametrize("extra", [{}, dict(micro_batch_size=4, trim_micro_batches=True)])
def test_trainer_share_prompt(learnt, tmp_path, extra):
    "The shared prompt with compaction, alone and with trimmed micro-batches: the plain run's steps to float order."
    kw = dict(model=learnt, algo=get_algo("grpo", beta=0.0), task_kw=dict(max_digits=1, scratchpad=False), steps=3, n_prompts=4, group_size=4,
              max_new_tokens=8, lr=1e-3, n_train=60, n_eval=0, progress=False, threads=1)
    a = train(TrainConfig(out_dir=str(tmp_path / "plain"), share_prompt=False, compact_generation=False, **{**extra, "trim_micro_batches": False}, **kw))
    b = train(TrainConfig(out_dir=str(tmp_path / "shared"), share_prompt=True, compact_generation=True, **extra, **kw))
    assert any(r["grad_norm"] > 0 for r in a[1:])
    for ra, rb in zip(a[1:], b[1:]):
        for k in ("resp_len", "acc", "loss", "grad_norm", "entropy"):
            assert ra[k] == pytest.approx(rb[k], rel=1e-3, abs=1e-5), (k, ra[k], rb[k])
    assert "share_prompt" in RUN_CONTROL
    assert lab_key(TrainConfig(out_dir="x", **kw)) == lab_key(TrainConfig(out_dir="x", share_prompt=True, **kw))


def test_levers_are_the_default_and_the_lab_keeps_its_path(tmp_path):
    """New runs take compaction, the shared prompt pass and trimmed micro-batches by default; the lab trains on `LAB_PATH`
    (the path its cached runs were made with), under the same key."""
    from rl_notes.lab import LAB_PATH, _lab_prepare
    from rl_notes.rundir import RunDir
    c = TrainConfig(model="m")
    assert c.compact_generation and c.share_prompt and c.trim_micro_batches
    key = lab_key(c)
    out = _lab_prepare(c, tmp_path, force=False)
    assert all(getattr(c, k) == v for k, v in LAB_PATH.items()) and lab_key(c) == key and out.name == key
    import json
    job = json.loads(RunDir(out).job_file.read_text())["cfg"]
    assert not job["compact_generation"] and not job["share_prompt"]


@pytest.mark.parametrize("group_size,T", [(4, 8), (1, 5), (3, 1)])
def test_shared_prefill_draws_the_same(group_size, T):
    "`generate(share_prompt=True)`: one prefill per prompt, its keys/values repeated for its G rows; the same tokens, log-probs to float order."
    tok = build_tokenizer(); model = tiny_llama(tok, seed=0)
    prompts = ["347+285=", "12+3=", "9999+1="]
    a = generate(model, tok, prompts, group_size=group_size, max_new_tokens=T, seed=3)
    for compact in (False, True):
        b = generate(model, tok, prompts, group_size=group_size, max_new_tokens=T, seed=3, share_prompt=True, compact=compact)
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.response_mask, b.response_mask)
        torch.testing.assert_close(b.old_logp, a.old_logp, atol=1e-5, rtol=0)
