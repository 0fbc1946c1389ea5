"Tests of the Hugging Face side of rl_notes.models: the BPE chat tokenizer, the tiny Qwen2, loading, LoRA, gradient checkpointing."
import json, sys, unicodedata
from unittest import mock

import pytest
import torch
from hypothesis import given, settings, strategies as st
from transformers import AutoTokenizer, LogitsProcessorList

from rl_notes.core import logprobs_from_logits
from rl_notes.models import (CHAT_SPECIAL_TOKENS, CHATML_TEMPLATE, apply_lora, build_bpe_tokenizer, build_tokenizer,
                             enable_gradient_checkpointing, load_model, load_tokenizer, save_tiny_chat_model, tiny_qwen2,
                             _synthetic_corpus)

torch.set_num_threads(1)

MSGS = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2 + 3?"}]
CHAT = "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
IM_END, EOT = 2, 0


@pytest.fixture(scope="module")
def bpe(): return build_bpe_tokenizer()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    "A tiny chat model directory written by save_tiny_chat_model."
    return save_tiny_chat_model(tmp_path_factory.mktemp("qwen") / "tiny")


def _ids(tok, text=CHAT + "2 + 3 = 5.\n#### 5<|im_end|>"):
    return torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])   # (1, T)


def test_save_load_round_trip(saved, bpe):
    names = {f.name for f in saved.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not any(n.endswith((".bin", ".pt")) for n in names)
    model, tok = load_model(saved)
    assert type(model).__name__ == "Qwen2ForCausalLM" and not model.training
    ref = tiny_qwen2(bpe)                       # the same seed: the same weights
    x = _ids(tok)
    with torch.no_grad(): assert torch.equal(model(x).logits, ref(x).logits)
    assert model.config.vocab_size == len(tok) == 512


def test_chat_template(saved, bpe):
    assert bpe.chat_template == CHATML_TEMPLATE
    assert bpe.apply_chat_template(MSGS, tokenize=False, add_generation_prompt=True) == CHAT
    assert bpe.apply_chat_template(MSGS, tokenize=False) == CHAT.removesuffix("<|im_start|>assistant\n")
    _, tok = load_model(saved)
    assert tok.apply_chat_template(MSGS, tokenize=False, add_generation_prompt=True) == CHAT
    ids = tok(CHAT, add_special_tokens=False)["input_ids"]
    assert ids.count(1) == 3 and ids.count(2) == 2        # special tokens are single ids
    assert ids == bpe(CHAT, add_special_tokens=False)["input_ids"]
    assert build_bpe_tokenizer(chat_template=None).chat_template is None


@pytest.fixture(scope="module")
def loaded_tok(saved): return load_tokenizer(saved)


@given(s=st.text(max_size=60))
@settings(max_examples=150, deadline=None)
def test_loaded_tokenizer_encodes_like_the_trained_one(bpe, loaded_tok, s):
    "AutoTokenizer loads a qwen2 directory as Qwen2Tokenizer (its own pipeline): the ids must not change."
    assert type(loaded_tok).__name__ == "Qwen2Tokenizer"
    ids = bpe(s, add_special_tokens=False)["input_ids"]
    assert loaded_tok(s, add_special_tokens=False)["input_ids"] == ids
    assert bpe.decode(ids) == unicodedata.normalize("NFC", s)


def test_special_tokens_no_pad_no_bos(bpe, saved, tmp_path):
    assert bpe.convert_tokens_to_ids(list(CHAT_SPECIAL_TOKENS)) == [0, 1, 2]
    assert (bpe.eos_token, bpe.pad_token, bpe.bos_token, bpe.padding_side) == ("<|im_end|>", None, None, "left")
    assert bpe("hello")["input_ids"] == bpe("hello", add_special_tokens=False)["input_ids"]   # nothing added
    cfg = json.loads((saved / "tokenizer_config.json").read_text())
    assert cfg.get("pad_token") is None and cfg.get("bos_token") is None
    bpe.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path).pad_token is None    # saved without one
    tok = load_tokenizer(saved)
    assert (tok.pad_token, tok.pad_token_id, tok.padding_side) == ("<|im_end|>", IM_END, "left")   # the loader: pad = EOS
    enc = tok(["What is 2 + 3?", "Hi"], padding=True)
    assert enc["input_ids"][1][0] == IM_END and enc["attention_mask"][1][0] == 0


def test_two_eos_ids(saved):
    model, tok = load_model(saved)
    assert model.generation_config.eos_token_id == [IM_END, EOT]
    assert model.config.eos_token_id == IM_END and model.config.pad_token_id is None
    gen = json.loads((saved / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [IM_END, EOT]
    x = _ids(tok, CHAT)
    for stop in (IM_END, EOT):                 # force `stop` as the 4th new token: generation ends there
        def force(input_ids, scores, stop=stop):
            if input_ids.shape[1] == x.shape[1] + 3: scores[:, stop] = scores.max() + 100
            return scores
        with torch.no_grad():
            out = model.generate(x, max_new_tokens=20, do_sample=False, pad_token_id=IM_END, logits_processor=LogitsProcessorList([force]))
        assert out.shape[1] == x.shape[1] + 4 and out[0, -1].item() == stop


def test_dtypes(saved):
    for name, dt in (("bfloat16", torch.bfloat16), ("float16", torch.float16), ("float32", torch.float32), (torch.bfloat16, torch.bfloat16)):
        model, tok = load_model(saved, dtype=name)
        assert all(w.dtype == dt for w in model.parameters())
    model, tok = load_model(saved, dtype="bfloat16")
    with torch.no_grad(): assert model(_ids(tok)).logits.dtype == torch.bfloat16
    for bad in ("fp16", "bf16", "int8", torch.int64, None):
        with pytest.raises(ValueError, match="`dtype` must be one of 'float32', 'bfloat16', 'float16'"): load_model(saved, dtype=bad)


def _seq_logp(model, ids):  # (B, T-1)
    return logprobs_from_logits(model(input_ids=ids[:, :-1]).logits, ids[:, 1:])


def test_lora_trainable_count_and_disable_adapter(bpe):
    base = tiny_qwen2(bpe)
    x = _ids(bpe)
    n_base = sum(w.numel() for w in base.parameters())
    ptrs = {w.data_ptr() for w in base.parameters()}
    r = 4
    expected = sum(r * (m.in_features + m.out_features) for n, m in base.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head")
    with torch.no_grad(): logp_base = _seq_logp(base, x)
    policy = apply_lora(base, r=r, alpha=8)
    n_train = sum(w.numel() for w in policy.parameters() if w.requires_grad)
    assert n_train == expected == 2 * 4 * (64 + 64 + 64 + 32 + 64 + 32 + 64 + 64 + 64 + 192 + 64 + 192 + 192 + 64)
    assert sum(w.numel() for w in policy.parameters()) == n_base + n_train     # no second copy of the weights
    assert {w.data_ptr() for w in policy.parameters() if not w.requires_grad} == ptrs
    with torch.no_grad():
        assert torch.equal(_seq_logp(policy, x), logp_base)
        with policy.disable_adapter(): assert torch.equal(_seq_logp(policy, x), logp_base)
    opt = torch.optim.SGD([w for w in policy.parameters() if w.requires_grad], lr=0.5)
    for _ in range(2):
        loss = -_seq_logp(policy, x).mean(); opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        assert not torch.allclose(_seq_logp(policy, x), logp_base)
        with policy.disable_adapter(): assert torch.equal(_seq_logp(policy, x), logp_base)   # the reference is untouched
        assert not torch.allclose(_seq_logp(policy, x), logp_base)   # and the adapters are back on after the block


def test_lora_target_modules_list(bpe):
    policy = apply_lora(tiny_qwen2(bpe), r=2, target_modules=["q_proj", "v_proj"])
    n_train = sum(w.numel() for w in policy.parameters() if w.requires_grad)
    assert n_train == 2 * 2 * ((64 + 64) + (64 + 32))          # 2 layers x r x (in + out) for q and v


def _grads(model, ids):
    model.train(); model.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    return {n: w.grad.clone() for n, w in model.named_parameters() if w.grad is not None}


def test_gradient_checkpointing_same_gradients(bpe):
    x = _ids(bpe)
    g0 = _grads(tiny_qwen2(bpe), x)
    m = enable_gradient_checkpointing(tiny_qwen2(bpe))
    assert m.is_activation_checkpointing and m.config.use_cache is False
    g1 = _grads(m, x)
    assert g0.keys() == g1.keys() and len(g0) == sum(1 for _ in m.parameters())
    for n in g0: assert torch.allclose(g0[n], g1[n], atol=1e-6, rtol=1e-5), n
    # under LoRA too (frozen inputs to the first block: the non-reentrant variant still gives adapter gradients)
    def lora(): return apply_lora(tiny_qwen2(bpe), r=4, seed=0)   # the same adapters each time
    ga = _grads(lora(), x)
    gb = _grads(enable_gradient_checkpointing(lora()), x)
    assert ga.keys() == gb.keys() and all("lora_" in n for n in ga) and ga
    for n in ga: assert torch.allclose(ga[n], gb[n], atol=1e-6, rtol=1e-5), n


def test_remote_code_never_runs(saved, tmp_path):
    import shutil
    p = tmp_path / "remote"; shutil.copytree(saved, p)
    marker = tmp_path / "MARKER"
    c = json.loads((p / "config.json").read_text()) | {"auto_map": {"AutoConfig": "evil.Cfg", "AutoModelForCausalLM": "evil.Model"}}
    (p / "config.json").write_text(json.dumps(c))
    tc = json.loads((p / "tokenizer_config.json").read_text()) | {"auto_map": {"AutoTokenizer": ["evil.Tok", None]}}
    (p / "tokenizer_config.json").write_text(json.dumps(tc))
    (p / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                               "from transformers import Qwen2Config as Cfg, Qwen2ForCausalLM as Model, PreTrainedTokenizerFast as Tok\n")
    model, tok = load_model(p)
    assert type(model).__module__ == "transformers.models.qwen2.modeling_qwen2" and not marker.exists()
    (p / "config.json").write_text(json.dumps(c | {"model_type": "evil-qwen"}))
    with pytest.raises(ValueError, match="contains custom code"): load_model(p)
    assert not marker.exists()


def test_bad_input(bpe, saved, tmp_path):
    import shutil
    p = tmp_path / "notok"; shutil.copytree(saved, p)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"): (p / f).unlink()
    with pytest.raises(ValueError, match=r"has no tokenizer \(tokenizer.json / tokenizer_config.json\)"): load_model(p)
    with pytest.raises(ValueError, match="model directory .* has no tokenizer"): load_tokenizer(p)
    with pytest.raises(ValueError, match="`vocab_size` must be an int > 259"): build_bpe_tokenizer(vocab_size=200)
    with pytest.raises(ValueError, match="`texts` must be a non-empty list of str"): build_bpe_tokenizer("text")
    with pytest.raises(ValueError, match="`texts`"): build_bpe_tokenizer([])
    with pytest.raises(ValueError, match="`padding_side`"): build_bpe_tokenizer(padding_side="top")
    with pytest.raises(ValueError, match="divisible by `kv_heads`"): tiny_qwen2(bpe, kv_heads=3)
    with pytest.raises(ValueError, match="divisible by `heads`"): tiny_qwen2(bpe, hidden_size=66)
    with pytest.raises(ValueError, match=r"`vocab_size` \(10\) is smaller"): tiny_qwen2(bpe, vocab_size=10)
    with pytest.raises(ValueError, match="needs the tokens <|im_end|>"): tiny_qwen2(build_tokenizer())
    with pytest.raises(ValueError, match="`r` must be an int >= 1"): apply_lora(tiny_qwen2(bpe), r=0)
    with pytest.raises(ValueError, match="`alpha`"): apply_lora(tiny_qwen2(bpe), alpha=-1)
    with pytest.raises(ValueError, match="`dropout`"): apply_lora(tiny_qwen2(bpe), dropout=1.5)
    with mock.patch.dict(sys.modules, {"peft": None}):
        with pytest.raises(ImportError, match=r'pip install "rl_notes\[lora\]"'): apply_lora(tiny_qwen2(bpe))


def test_padded_vocab_and_seeds(bpe, tmp_path):
    "A model vocabulary larger than the tokenizer's (padded rows); seeds change the corpus and the weights, not the global RNG."
    m = tiny_qwen2(bpe, vocab_size=640)
    assert m.get_input_embeddings().weight.shape == (640, 64) and m.config.vocab_size == 640
    state = torch.random.get_rng_state()
    p = save_tiny_chat_model(tmp_path / "s1", seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    m1, t1 = load_model(p)
    assert t1.get_vocab() != bpe.get_vocab() and not torch.equal(m1.lm_head.weight, tiny_qwen2(bpe).lm_head.weight)
    assert _synthetic_corpus(50, seed=3) == _synthetic_corpus(50, seed=3)
