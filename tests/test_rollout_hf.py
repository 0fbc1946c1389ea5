"""Rollouts on a Hugging Face chat model (a tiny random Qwen2 with a BPE tokenizer and a chat template, saved by the test),
and the character model's rollout pinned to the sampling algorithm it has always used."""
import hashlib

import pytest
import torch

from rl_notes.data import RewardSet
from rl_notes.models import build_tokenizer, load_model, save_tiny_chat_model, tiny_llama
from rl_notes.rollout import _sample, evaluate, generate, position_ids_from_mask, response_logprobs
from rl_notes.tasks import get_task

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    d = save_tiny_chat_model(tmp_path_factory.mktemp("qwen") / "m", vocab_size=300, hidden_size=32, num_layers=1)
    model, tok = load_model(d)
    return model.eval(), tok


CHATS = [[{"role": "user", "content": "What is 2 + 3?"}],
         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]]


def test_conversational_prompts(qwen):
    model, tok = qwen
    im_end, eot = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert tok.eos_token_id == im_end and sorted(model.generation_config.eos_token_id) == sorted([im_end, eot])
    ro = generate(model, tok, CHATS * 8, group_size=4, max_new_tokens=40, seed=0)
    assert ro.prompts == CHATS * 8                                     # the message lists, not the rendered text
    P = ro.prompt_len
    for i in range(len(ro)):
        real = ro.input_ids[i, :P][ro.attention_mask[i, :P].bool()]
        text = tok.decode(real)
        assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n")
        assert text == tok.apply_chat_template(CHATS[(i // 4) % 2], tokenize=False, add_generation_prompt=True)
    # no pad token: rows are padded with EOS, on the left of the shorter prompt and after each ended response
    assert ro.pad_token_id == im_end
    assert (ro.input_ids[:, :P][ro.attention_mask[:, :P] == 0] == im_end).all()
    # either EOS id ends a row: mask up to and including it, nothing after, no EOS earlier
    eos = torch.tensor([im_end, eot])
    ended = ~ro.truncated
    last = ro.lengths - 1
    resp = ro.response_ids
    ends = resp[torch.arange(len(ro)), last]
    assert torch.isin(ends[ended], eos).all() and not torch.isin(ends[~ended], eos).any()
    assert {im_end, eot} <= set(ends[ended].tolist())                  # both ids were seen ending a row
    for i in range(len(ro)):
        L = int(ro.lengths[i])
        assert not torch.isin(resp[i, :L - 1], eos).any()
        assert (resp[i, L:] == ro.pad_token_id).all() and not ro.response_mask[i, L:].any()
        assert ro.response_text[i] == tok.decode(resp[i, :L - int(ended[i])], skip_special_tokens=True)
    # old_logp is the log-prob the model gives the sampled tokens
    lp = response_logprobs(model, ro)
    assert (lp - ro.old_logp).abs().max() < 1e-5


def test_only_the_configured_ids_stop(qwen):
    "With <|endoftext|> removed from the generation config, rows that ended with it run on."
    model, tok = qwen
    im_end, eot = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    full = generate(model, tok, CHATS * 8, group_size=4, max_new_tokens=40, seed=0)
    saved = model.generation_config.eos_token_id
    try:
        model.generation_config.eos_token_id = [im_end]
        one = generate(model, tok, CHATS * 8, group_size=4, max_new_tokens=40, seed=0)
    finally:
        model.generation_config.eos_token_id = saved
    ends_eot = (full.response_ids[torch.arange(len(full)), full.lengths - 1] == eot) & ~full.truncated
    assert ends_eot.any()
    # the same draws up to there (one RNG stream), so those rows go on: longer, or cut at max_new_tokens without an end
    assert ((one.lengths > full.lengths) | one.truncated)[ends_eot].all()
    assert torch.equal(one.response_ids[~ends_eot & ~full.truncated, :1], full.response_ids[~ends_eot & ~full.truncated, :1])


def test_string_prompts_keep_bos_handling(qwen):
    model, tok = qwen
    ro = generate(model, tok, ["12+3=", "7+1="], max_new_tokens=4, seed=0)
    assert ro.prompts == ["12+3=", "7+1="]
    assert tok.decode(ro.input_ids[0, :ro.prompt_len][ro.attention_mask[0, :ro.prompt_len].bool()]) == "12+3="


def test_mixed_or_templateless_prompts_fail(qwen):
    model, tok = qwen
    with pytest.raises(ValueError):
        generate(model, tok, ["a", CHATS[0]], max_new_tokens=2)
    ctok = build_tokenizer()
    with pytest.raises(ValueError, match="chat template"):
        generate(tiny_llama(ctok), ctok, CHATS, max_new_tokens=2)


def test_evaluate_with_a_reward_set(qwen):
    model, tok = qwen
    rows = [{"prompt": c, "target": str(i)} for i, c in enumerate(CHATS * 2)]
    def length_reward(prompts, completions, target, **kw):
        assert len(prompts) == len(completions) == len(target) and isinstance(completions[0], list)
        return [float(len(c[0]["content"]) > 3) for c in completions]
    rs = RewardSet([length_reward])
    res = evaluate(model, tok, rs, rows, max_new_tokens=8)
    assert res["n"] == 4 and 0 <= res["accuracy"] <= 1 and res["parsed_rate"] is None
    with pytest.raises(ValueError, match="`max_new_tokens` is required"):
        evaluate(model, tok, rs, rows)
    # a task still works, and its reward set gives the same accuracy
    task = get_task("addition", max_digits=2, scratchpad=False)
    ctok = build_tokenizer(); cm = tiny_llama(ctok, seed=0)
    data = task.dataset(16, seed=0, split="test")
    a = evaluate(cm, ctok, task, data, max_new_tokens=6)
    if hasattr(task, "reward_set"):
        b = evaluate(cm, ctok, task.reward_set(), data, max_new_tokens=6)
        assert a["accuracy"] == b["accuracy"] and a["parsed_rate"] == b["parsed_rate"]


# ---------------------------------------------------------------- the character model: the sampling algorithm, pinned
def _reference_rollout(model, tok, prompts, G, T, temperature, seed):
    "The rollout algorithm written out plainly (tokenizer padding, one growing cache, full log_softmax): what `generate` must equal."
    from transformers import DynamicCache
    enc = tok(prompts, padding=True, return_tensors="pt")
    ids, att = enc["input_ids"].repeat_interleave(G, 0), enc["attention_mask"].repeat_interleave(G, 0)
    B = ids.shape[0]
    gen = torch.Generator().manual_seed(seed)
    pos = position_ids_from_mask(att)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=att, position_ids=pos, cache=DynamicCache(config=model.config), use_cache=True, logits_to_keep=1)
        nxt, done, toks, lps = pos[:, -1:] + 1, torch.zeros(B, dtype=torch.bool), [], []
        for t in range(T):
            z = out.logits[:, -1].float()
            tok_ = _sample(z, temperature, gen)
            zt = z / temperature if temperature != 1.0 else z
            m = zt.amax(-1, keepdim=True)
            lp = zt.gather(-1, tok_[:, None]).squeeze(-1) - (m.squeeze(-1) + (zt - m).exp().sum(-1).log())
            live = ~done
            tok_ = torch.where(live, tok_, torch.full_like(tok_, tok.pad_token_id))
            toks.append(tok_); lps.append(torch.where(live, lp, torch.zeros_like(lp)))
            done = done | (tok_ == tok.eos_token_id)
            if bool(done.all()) or t == T - 1: break
            att = torch.cat([att, live[:, None].long()], 1)
            out = model(input_ids=tok_[:, None], attention_mask=att, position_ids=nxt, cache=out.cache, use_cache=True)
            nxt = nxt + 1
    return torch.cat([ids, torch.stack(toks, 1)], 1), torch.stack(lps, 1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_character_rollout_is_the_reference_algorithm(temperature):
    tok = build_tokenizer(); model = tiny_llama(tok, seed=0).eval()
    prompts = ["347+285=", "12+3=", "9999+1="]
    ids, lp = _reference_rollout(model, tok, prompts, 4, 12, temperature, seed=0)
    ro = generate(model, tok, prompts, 4, 12, temperature=temperature, seed=0)
    assert torch.equal(ro.input_ids, ids) and torch.equal(ro.old_logp, lp)
    # the static cache attends over a pre-allocated, masked buffer: the same draws, log-probs equal to float32 rounding
    st = generate(model, tok, prompts, 4, 12, temperature=temperature, seed=0, cache="static")
    assert torch.equal(st.input_ids, ids) and torch.allclose(st.old_logp, lp, atol=1e-6)


def test_character_rollout_checksum():
    "The ids, masks, old_logp and texts of a fixed rollout, hashed: any change to sampling or bookkeeping shows here."
    tok = build_tokenizer(); model = tiny_llama(tok, seed=0).eval()
    h = hashlib.sha256()
    for cache in ("dynamic", "static"):
        ro = generate(model, tok, ["347+285=", "12+3=", "9999+1="], 4, 12, temperature=1.0, seed=0, cache=cache)
        for t in (ro.input_ids, ro.attention_mask, ro.response_mask, ro.truncated):
            h.update(t.numpy().tobytes())
        h.update("\n".join(ro.response_text).encode())
    assert h.hexdigest()[:16] == CHECKSUM


CHECKSUM = "a6261905b78c2a96"  # of the rollout before rl_notes supported chat models (x86-64, torch 2.13); integers and text only
