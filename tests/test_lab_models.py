"Tests of the RL lab's tokenizer, model loading, SFT cache, tasks and rollouts (fast: tiny models, a few steps)."
import json, random
import pytest
import torch
from hypothesis import given, settings, strategies as st
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rl_notes.tasks import CHARS, get_task, parse_expression
from rl_notes.models import build_tokenizer, tiny_llama, load_model, sft_warm_start
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
              target_accuracy=1.0, eval_every=1, val_n=8, progress=False)
    p1 = sft_warm_start(task, cache_dir=tmp_path / "a", **kw)
    info = json.loads((p1 / "sft_config.json").read_text())
    assert len(info["loss"]) == 3 and "accuracy" in info["eval"]
    assert [s for s, _ in info["val_accuracy"]] == [1, 2, 3] and info["stopped_at"] == 3   # target never reached
    mtime = (p1 / "model.safetensors").stat().st_mtime_ns
    assert sft_warm_start(task, cache_dir=tmp_path / "a", **kw) == p1             # cache hit: same dir
    assert (p1 / "model.safetensors").stat().st_mtime_ns == mtime                  # not rewritten
    p2 = sft_warm_start(task, cache_dir=tmp_path / "b", **kw)                      # fresh dir: same weights
    m1, _ = load_model(p1); m2, _ = load_model(p2)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    p3 = sft_warm_start(task, cache_dir=tmp_path / "a", **{**kw, "steps": 4})     # other config: other dir
    assert p3 != p1
    assert not [q for q in (tmp_path / "a").iterdir() if q.name.startswith(".tmp")]
    with pytest.raises(ValueError, match="`steps`"): sft_warm_start(task, cache_dir=tmp_path, **{**kw, "steps": 0})
    with pytest.raises(ValueError, match="`target_accuracy`"): sft_warm_start(task, cache_dir=tmp_path, **{**kw, "target_accuracy": 1.5})


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
