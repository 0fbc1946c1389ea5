"""rl_notes.data: datasets from local files, chat-template rendering, reward functions with TRL's signature.

Everything these tests need is built here: data files in tmp_path, `save_to_disk` directories, tokenizers from
`tokenizers` (no hub, no network). The TRL cross-check calls TRL 1.16's own `GRPOTrainer._calculate_rewards` and
restates its weighted `nansum` combination.
"""
import csv, json, math, re, sys, warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset, DatasetDict
from hypothesis import given, settings, strategies as st

from rl_notes.data import (RewardFunctionError, RewardSet, check_prompts, completions_for, is_conversational,
                           load_dataset_splits, load_reward_function, render_prompts, reward_name)

CHAT = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "What is 2+3?"}]
ROWS = [{"prompt": f"{i}+{i + 1}=", "answer": str(2 * i + 1), "level": i % 3} for i in range(12)]
CHAT_ROWS = [{"prompt": [{"role": "user", "content": f"What is {i}+{i}?"}], "solution": str(2 * i)} for i in range(6)]
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _write(path: Path, rows: list, fmt: str) -> Path:
    "Write `rows` to `path` as jsonl / json (an array) / parquet / csv, without going through rl_notes."
    if fmt == "jsonl": path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json": path.write_text(json.dumps(rows))
    elif fmt == "parquet": Dataset.from_list(rows).to_parquet(str(path))
    elif fmt == "csv":
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
    return path


def _rows(ds) -> list:
    return [ds[i] for i in range(len(ds))]


def _key(r: dict) -> str:
    return json.dumps(r, sort_keys=True)


# ---- loading

@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet", "csv"])
def test_file_round_trip(tmp_path, fmt):
    path = _write(tmp_path / f"data.{fmt}", ROWS, fmt)
    train, test = load_dataset_splits(path, test_frac=0.25, seed=3)
    assert (len(train), len(test)) == (9, 3)
    got = _rows(train) + _rows(test)
    # every row and column, types kept; csv has no types: pandas infers them, so an `answer` of digits comes back an int
    want = [{**r, "answer": int(r["answer"])} if fmt == "csv" else r for r in ROWS]
    assert sorted(map(_key, got)) == sorted(map(_key, want))
    assert not set(map(_key, _rows(train))) & set(map(_key, _rows(test)))


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet"])
def test_conversational_round_trip(tmp_path, fmt):
    path = _write(tmp_path / f"chat.{fmt}", CHAT_ROWS, fmt)
    train, test = load_dataset_splits(path, test_frac=0.5)
    got = _rows(train) + _rows(test)
    assert sorted(map(_key, got)) == sorted(map(_key, CHAT_ROWS))
    assert check_prompts(got) is True


def test_held_out_split_is_train_test_split(tmp_path):
    for n, frac, seed in [(10, 0.1, 0), (30, 0.1, 1), (7, 0.3, 2), (100, 0.05, 5)]:
        ds = Dataset.from_list([{"prompt": f"p{i}"} for i in range(n)])
        train, test = load_dataset_splits(ds, test_frac=frac, seed=seed)
        ref = ds.train_test_split(test_size=frac, seed=seed)
        assert list(train["prompt"]) == list(ref["train"]["prompt"]) and list(test["prompt"]) == list(ref["test"]["prompt"])
    # at least one row on each side, where `train_test_split` itself would refuse
    tiny = Dataset.from_list([{"prompt": "a"}, {"prompt": "b"}])
    assert [len(s) for s in load_dataset_splits(tiny, test_frac=0.01)] == [1, 1]
    assert [len(s) for s in load_dataset_splits(tiny, test_frac=0.99)] == [1, 1]
    a, b = load_dataset_splits(Dataset.from_list(ROWS), seed=0), load_dataset_splits(Dataset.from_list(ROWS), seed=0)
    assert list(a[1]["prompt"]) == list(b[1]["prompt"])                # seeded: the same draw twice


def test_save_to_disk_directories(tmp_path):
    Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "ds"))
    before = sorted(p.name for p in (tmp_path / "ds").iterdir())
    train, test = load_dataset_splits(tmp_path / "ds", test_frac=0.25)
    assert (len(train), len(test)) == (9, 3)
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == before   # nothing written into the user's directory

    DatasetDict(train=Dataset.from_list(ROWS[:8]), test=Dataset.from_list(ROWS[8:])).save_to_disk(str(tmp_path / "dd"))
    train, test = load_dataset_splits(str(tmp_path / "dd"))
    assert list(train["prompt"]) == [r["prompt"] for r in ROWS[:8]] and list(test["prompt"]) == [r["prompt"] for r in ROWS[8:]]

    DatasetDict(train=Dataset.from_list(ROWS)).save_to_disk(str(tmp_path / "dd_train"))
    assert [len(s) for s in load_dataset_splits(tmp_path / "dd_train", test_frac=0.5)] == [6, 6]


def test_dataset_dict_in_memory():
    dd = DatasetDict(train=Dataset.from_list(ROWS[:8]), test=Dataset.from_list(ROWS[8:]))
    assert [len(s) for s in load_dataset_splits(dd)] == [8, 4]
    dd = DatasetDict(dev=Dataset.from_list(ROWS[:8]), validation=Dataset.from_list(ROWS[8:]))
    assert [len(s) for s in load_dataset_splits(dd, test_split="validation")] == [8, 4]
    with pytest.raises(ValueError, match="no 'train' split"):
        load_dataset_splits(DatasetDict(a=Dataset.from_list(ROWS), b=Dataset.from_list(ROWS)))


def test_split_column(tmp_path):
    rows = [{**r, "split": "test" if r["level"] == 0 else "train"} for r in ROWS]
    path = _write(tmp_path / "marked.jsonl", rows, "jsonl")
    train, test = load_dataset_splits(path, split_column="split")
    assert list(test["prompt"]) == [r["prompt"] for r in rows if r["split"] == "test"]
    assert list(train["prompt"]) == [r["prompt"] for r in rows if r["split"] == "train"]
    assert [len(s) for s in load_dataset_splits(path, split_column="level", test_split=1)] == [8, 4]
    with pytest.raises(ValueError, match=r"`split_column` 'part' is not a column of `dataset` file .*; its columns: \['prompt'"):
        load_dataset_splits(path, split_column="part")
    with pytest.raises(ValueError, match="marks 0 of 12 rows 'eval'; both sides need rows"):
        load_dataset_splits(path, split_column="split", test_split="eval")


def test_loading_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"`dataset` path .*nope\.jsonl' does not exist.*or a hub id 'org/name"):
        load_dataset_splits(tmp_path / "nope.jsonl")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)        # a hub id goes through the Hugging Face cache:
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))   # an empty one, offline
    with pytest.raises(ValueError, match=r"`dataset` 'openai/gsm8k': HF_HUB_OFFLINE=1 and it is not in the Hugging Face cache .*hf download openai/gsm8k --repo-type dataset"):
        load_dataset_splits("openai/gsm8k")
    _write(tmp_path / "q.jsonl", [{"question": "1+1", "answer": "2"}] * 3, "jsonl")
    with pytest.raises(ValueError, match=r"q\.jsonl' has no `prompt` column; its columns: \['question', 'answer'\]"):
        load_dataset_splits(tmp_path / "q.jsonl")
    _write(tmp_path / "mixed.jsonl", [{"prompt": "a"}, {"prompt": CHAT}], "jsonl")
    with pytest.raises(ValueError, match=r"mixed\.jsonl' mixes string and conversational prompts \(row 0 is a str, row 1"):
        load_dataset_splits(tmp_path / "mixed.jsonl")
    _write(tmp_path / "num.jsonl", [{"prompt": "a"}, {"prompt": 3}], "jsonl")
    with pytest.raises(ValueError, match=r"num\.jsonl' row 1 column `prompt`: `prompt` must be a str or a list .* got int 3"):
        load_dataset_splits(tmp_path / "num.jsonl")
    _write(tmp_path / "holes.csv", [{"prompt": "a", "x": 1}, {"prompt": "", "x": 2}], "csv")
    with pytest.raises(ValueError, match=r"holes\.csv' row 1 column `prompt`"):
        load_dataset_splits(tmp_path / "holes.csv")                  # an empty csv cell is None, not a prompt
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a"}\n{not json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl' line 2, column 2: not JSON \(Expecting property name"):   # the line, not a byte offset
        load_dataset_splits(tmp_path / "bad.jsonl")
    (tmp_path / "data.txt").write_text("a\n")
    with pytest.raises(ValueError, match=r"has suffix '\.txt'; supported: \.jsonl, \.json, \.parquet, \.csv"):
        load_dataset_splits(tmp_path / "data.txt")
    (tmp_path / "plain_dir").mkdir()
    with pytest.raises(ValueError, match="is not a `save_to_disk` directory"):
        load_dataset_splits(tmp_path / "plain_dir")
    with pytest.raises(ValueError, match="has 1 row"):
        load_dataset_splits(Dataset.from_list(ROWS[:1]))
    for frac in (0, 1, -0.1, True, "0.1"):
        with pytest.raises(ValueError, match=r"`test_frac` must be a number in \(0, 1\)"):
            load_dataset_splits(Dataset.from_list(ROWS), test_frac=frac)
    with pytest.raises(ValueError, match="`dataset` must be a Dataset, a DatasetDict or a local path, got int 3"):
        load_dataset_splits(3)
    with pytest.raises(ValueError, match="test' has no `prompt` column"):
        load_dataset_splits(DatasetDict(train=Dataset.from_list(ROWS), test=Dataset.from_list([{"q": "x"}])))


def test_prompt_checks():
    assert is_conversational("hi") is False and is_conversational(CHAT) is True
    for bad, msg in [(None, "got NoneType None"), ({"role": "user", "content": "x"}, "got dict"), ([], "empty message list"),
                     ([{"role": "user"}], "message 0 is a message without 'content'"),
                     ([{"role": "user", "content": "a"}, {"content": "b"}], "message 1 is a message without 'role'"),
                     ([{"role": "user", "content": ["a"]}], "'content' is list")]:
        with pytest.raises(ValueError, match=msg.replace("(", r"\(")):
            is_conversational(bad)
    with pytest.raises(ValueError, match=r"src row 1 has no `prompt` column; its columns: \['q'\]"):
        check_prompts([{"prompt": "a"}, {"q": "b"}], "src")
    with pytest.raises(ValueError, match="mixes string and conversational prompts .row 1 is a str, row 0 a message list"):
        check_prompts([{"prompt": CHAT}, {"prompt": "b"}])
    with pytest.raises(ValueError, match="row 0 is list"):
        check_prompts([["prompt"]])


# ---- rendering

def _chat_tokenizer(template=TEMPLATE):
    "A character-level PreTrainedTokenizerFast with ChatML special tokens and (optionally) a chat template, built here."
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    chars = sorted(set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 +=?.,\n"))
    vocab = {t: i for i, t in enumerate(specials + chars + ["<unk>"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", unk_token="<unk>",
                                  additional_special_tokens=specials, padding_side="left")
    tok.chat_template = template
    return tok


def test_render_string_prompts_keep_special_tokens():
    from rl_notes.models import build_tokenizer
    tok = build_tokenizer()
    texts, special = render_prompts(tok, ["1+2=", "30+4="])
    assert (texts, special) == (["1+2=", "30+4="], True)
    ids = tok(texts[0], add_special_tokens=special)["input_ids"]
    assert ids[0] == tok.bos_token_id and tok.decode(ids, skip_special_tokens=True) == "1+2="
    with pytest.raises(ValueError, match="conversational prompts need a tokenizer with a chat template; .* has none"):
        render_prompts(tok, [CHAT])


def test_render_chat_prompts_as_trl_tokenizes_them():
    tok = _chat_tokenizer()
    prompts = [CHAT, [{"role": "user", "content": "What is 7+1?"}]]
    texts, special = render_prompts(tok, prompts)
    assert special is False
    assert texts[0] == ("<|im_start|>system\nAnswer with a number.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
                        "<|im_start|>assistant\n")
    for p, t in zip(prompts, texts):
        # TRL's GRPOTrainer tokenizes conversational prompts with apply_chat_template(tokenize=True): the same ids
        ref = tok.apply_chat_template(p, tokenize=True, add_generation_prompt=True)
        ref = ref["input_ids"] if hasattr(ref, "keys") else ref
        assert tok(t, add_special_tokens=special)["input_ids"] == list(ref)
    with pytest.raises(ValueError, match="mixes string and conversational prompts"):
        render_prompts(tok, [CHAT, "plain"])
    with pytest.raises(ValueError, match="has none"):
        render_prompts(_chat_tokenizer(template=None), [CHAT])
    with pytest.raises(ValueError, match="`prompts` is empty"):
        render_prompts(tok, [])
    with pytest.raises(ValueError, match="got one str"):
        render_prompts(tok, "plain")


def test_completions_for():
    assert completions_for(["a", "b"], ["x", "y"]) == ["x", "y"]
    assert completions_for([CHAT], ["5"]) == [[{"role": "assistant", "content": "5"}]]
    assert completions_for([], []) == []
    with pytest.raises(ValueError, match="`prompts` has 2 entries but `texts` has 1"):
        completions_for(["a", "b"], ["x"])


# ---- loading reward functions

REWARD_FILE = '''
def exact(prompts, completions, answer, **kwargs):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]

class Scaled:
    def __call__(self, prompts, completions, **kwargs): return [0.5] * len(prompts)

scaled = Scaled()
NOT_CALLABLE = 3
'''


def test_load_reward_function_by_file_and_module(tmp_path, monkeypatch):
    (tmp_path / "rewards.py").write_text(REWARD_FILE)
    f = load_reward_function(f"{tmp_path}/rewards.py:exact")
    assert f(prompts=["1+1="], completions=[" 2"], answer=["2"]) == [1.0] and reward_name(f) == "exact"
    assert reward_name(load_reward_function(f"{tmp_path}/rewards.py:scaled")) == "Scaled"
    monkeypatch.chdir(tmp_path)
    assert load_reward_function("rewards.py:exact")(prompts=["p"], completions=["3"], answer=["2"]) == [0.0]  # relative path
    # a second file with the same name elsewhere: its own module, no collision
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "rewards.py").write_text("def exact(prompts, completions, **kw): return [7.0] * len(prompts)\n")
    g = load_reward_function(f"{tmp_path}/other/rewards.py:exact")
    assert g(prompts=["p"], completions=["c"]) == [7.0] and f(prompts=["p"], completions=["2"], answer=["2"]) == [1.0]
    assert f.__module__ != g.__module__ and f.__module__ in sys.modules
    # an importable module, and a qualified name
    (tmp_path / "pkg_rl_notes_test").mkdir()
    (tmp_path / "pkg_rl_notes_test" / "__init__.py").write_text("")
    (tmp_path / "pkg_rl_notes_test" / "rw.py").write_text(REWARD_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reward_name(load_reward_function("pkg_rl_notes_test.rw:exact")) == "exact"
    assert load_reward_function("pkg_rl_notes_test.rw:Scaled.__call__").__name__ == "__call__"
    assert load_reward_function(len) is len


def test_load_reward_function_errors(tmp_path):
    (tmp_path / "rewards.py").write_text(REWARD_FILE)
    (tmp_path / "broken.py").write_text("x = 1\nraise RuntimeError('no GPU here\\nsecond line')\n")
    (tmp_path / "syntax.py").write_text("def f(:\n")
    cases = [("exact", "must look like 'package.module:function' or 'path/to/file.py:function'"),
             (":exact", "must look like"), ("rewards:", "must look like"), ("", "must look like"),
             ("no_such_module_rl_notes:f", "module 'no_such_module_rl_notes' cannot be imported: ModuleNotFoundError"),
             (f"{tmp_path}/missing.py:f", r"missing\.py' does not exist"),
             (f"{tmp_path}/rewards.py:nope", r"rewards\.py' has no attribute 'nope'"),
             ("math:nope", "module 'math' has no attribute 'nope'"),
             (f"{tmp_path}/rewards.py:NOT_CALLABLE", "'NOT_CALLABLE' is int 3, not callable"),
             (f"{tmp_path}/broken.py:f", r"failed: RuntimeError: no GPU here$"),
             (f"{tmp_path}/syntax.py:f", "failed: SyntaxError")]
    for spec, msg in cases:
        with pytest.raises(RewardFunctionError, match=msg) as e:
            load_reward_function(spec)
        assert isinstance(e.value, ValueError) and repr(spec) in str(e.value) and "\n" not in str(e.value), str(e.value)
    with pytest.raises(RewardFunctionError, match="got int 3"):
        load_reward_function(3)
    assert not [m for m in sys.modules if "broken" in m and m.startswith("_rl_notes_reward_")]   # a failed import leaves nothing


# ---- RewardSet

def accuracy(prompts, completions, **kwargs):
    "TRL-style: reads the `solution` column from **kwargs; None where a row has no solution."
    return [None if s is None else float(c.strip() == s) for c, s in zip(completions, kwargs["solution"])]


def brevity(prompts, completions, **kwargs):
    return [1.0 / (1 + len(c)) for c in completions]


def chat_accuracy(prompts, completions, solution, **kwargs):
    "TRL-style conversational: the completion is one assistant message."
    return [float(c[0]["content"].strip() == s) for c, s in zip(completions, solution)]


def chat_format(prompts, completions, **kwargs):
    return [None if p[-1]["content"].endswith("?") is False else float(c[0]["content"].strip().isdigit())
            for p, c in zip(prompts, completions)]


def _trl_per_func(funcs, rows, prompts, completions):
    "TRL 1.16's own GRPOTrainer._calculate_rewards on a stand-in trainer (one CPU process): (B, K) float32."
    pytest.importorskip("trl")
    from accelerate import PartialState
    from trl import GRPOTrainer
    PartialState()                                                     # TRL's gather and logger need accelerate's state
    fake = SimpleNamespace(accelerator=SimpleNamespace(device=torch.device("cpu"), is_main_process=True),
                           reward_funcs=list(funcs), reward_processing_classes=[None] * len(funcs),
                           reward_func_names=[f.__name__ for f in funcs], state=SimpleNamespace(global_step=0),
                           args=SimpleNamespace(report_to=[]), _log_completion_extra=lambda *a, **k: None,
                           _log_metric=lambda *a, **k: None, environments=None)
    return GRPOTrainer._calculate_rewards(fake, rows, prompts, completions, [[0]] * len(prompts))


def _trl_combine(rewards_per_func, weights):
    # TRL 1.16 GRPOTrainer._generate_and_score_completions, multi_objective_aggregation="sum_then_normalize":
    #   rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
    return (rewards_per_func * torch.tensor(weights, dtype=torch.float32).unsqueeze(0)).nansum(dim=1)


@pytest.mark.parametrize("chat", [False, True])
def test_trl_cross_check(chat):
    G = 3
    if chat:
        rows = [{"prompt": [{"role": "user", "content": f"What is {i}+{i}?"}], "solution": str(2 * i)} for i in range(3)]
        rows[1]["prompt"] = [{"role": "user", "content": "Say 2."}]    # chat_format returns None there
        funcs, weights = [chat_accuracy, chat_format], [1.0, 0.25]
        responses = ["0", "zero", " 0 ", "2", "two", "3", "4", "5", "four"]
    else:
        rows = [{"prompt": f"{i}+{i}=", "solution": None if i == 1 else str(2 * i)} for i in range(3)]
        funcs, weights = [accuracy, brevity], [1.0, -0.5]
        responses = ["0", "00", "", "2", "two", "1", "4", "4 ", "5"]
    rs = RewardSet(funcs, weights=weights)
    out = rs.score(rows, responses, group_size=G)
    # TRL's inputs: one dict per completion, the row repeated G times; prompts and completions in the same format
    inputs = [dict(rows[j // G]) for j in range(len(responses))]
    prompts = [x["prompt"] for x in inputs]
    completions = [[{"role": "assistant", "content": r}] for r in responses] if chat else list(responses)
    ref = _trl_per_func(funcs, inputs, prompts, completions)            # (B, K)
    mine = torch.stack([out["per_func"][n] for n in rs.names], dim=1)
    torch.testing.assert_close(mine, ref, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(out["reward"], _trl_combine(ref, weights), rtol=0, atol=0)
    assert torch.isnan(mine).any()                                      # the None path is exercised


def test_reward_set_basics(tmp_path):
    (tmp_path / "rewards.py").write_text(REWARD_FILE)
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": "4"}]
    rs = RewardSet([f"{tmp_path}/rewards.py:exact", brevity, f"{tmp_path}/rewards.py:exact"], weights=[2, 1, 0],
                   parsed=lambda prompts, completions, **kw: [c.isdigit() for c in completions])
    assert rs.names == ["exact", "brevity", "exact_2"] and rs.weights == [2.0, 1.0, 0.0] and len(rs) == 3
    out = rs.score(Dataset.from_list(rows), ["2", "3", "x4", "4"], group_size=2)
    torch.testing.assert_close(out["per_func"]["exact"], torch.tensor([1.0, 0.0, 0.0, 1.0]))
    torch.testing.assert_close(out["reward"], torch.tensor([2.5, 0.5, 1 / 3, 2.5]))
    assert out["parsed"].dtype == torch.bool and out["parsed"].tolist() == [True, True, False, True]
    r, p = rs.rewards(rows, ["2", "3", "x4", "4"], 2)
    assert torch.equal(r, out["reward"]) and torch.equal(p, out["parsed"]) and r.dtype == torch.float32 and r.shape == (4,)
    assert RewardSet([brevity]).rewards(rows, ["a", "b"])[1] is None
    cfg = rs.config()
    assert cfg == {"funcs": [f"{tmp_path}/rewards.py:exact", "test_data:brevity", f"{tmp_path}/rewards.py:exact"],
                   "weights": [2.0, 1.0, 0.0]}
    assert RewardSet(f"{tmp_path}/rewards.py:exact").names == ["exact"]  # one spec alone
    empty = rs.score([], [], group_size=4)
    assert empty["reward"].shape == (0,) and empty["parsed"].shape == (0,)
    assert "exact" in repr(rs)


def test_reward_functions_see_columns_and_copies():
    seen = {}
    def spy(prompts, completions, **kwargs):
        seen.update(kwargs); n = len(completions); completions.clear(); return [0.0] * n   # edits its arguments in place
    rows = [{"prompt": "a", "answer": "1", "completion": "gold", "meta": {"k": 1}}, {"prompt": "b", "answer": "2",
            "completion": "gold", "meta": {"k": 2}}]
    out = RewardSet([spy, brevity]).score(rows, ["x", "y", "zz", "w"], group_size=2)
    assert sorted(seen) == ["answer", "meta"]                          # `prompt` and `completion` are not passed as columns
    assert seen["answer"] == ["1", "1", "2", "2"] and seen["meta"][2] == {"k": 2}
    torch.testing.assert_close(out["per_func"]["brevity"], torch.tensor([0.5, 0.5, 1 / 3, 0.5]))  # spy's edit did not leak


def test_reward_set_errors():
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "a long prompt " * 10, "answer": "4"}]
    resp = ["2", "3", "4", "5"]
    def raises(prompts, completions, **kw): raise ZeroDivisionError("division by zero\nmore detail")
    def three(prompts, completions, **kw): return [1.0, 1.0, 1.0]
    def nan_last(prompts, completions, **kw): return [0.0] * (len(prompts) - 1) + [float("nan")]
    def neg_inf(prompts, completions, **kw): return [0.0, -math.inf, 0.0, 0.0]
    def strings(prompts, completions, **kw): return [0.0, 0.0, "1", 0.0]
    def a_dict(prompts, completions, **kw): return {"reward": [0.0] * 4}
    def matrix(prompts, completions, **kw): return torch.zeros(4, 1)
    def none_list(prompts, completions, **kw): return None
    cases = [(raises, r"reward function `raises` raised ZeroDivisionError: division by zero \(called on a batch of 4 completions"),
             (three, "reward function `three` returned 3 values for 4 completions"),
             (nan_last, re.escape(f"reward function `nan_last` returned nan for completion 3 (row 1, prompt {('a long prompt ' * 5)[:60] + '...'!r})")),
             (neg_inf, r"`neg_inf` returned -inf for completion 1 \(row 0, prompt '1\+1='\)"),
             (strings, "`strings` returned str '1' for completion 2 .row 1"),
             (a_dict, "`a_dict` returned dict"), (matrix, "`matrix` returned Tensor"), (none_list, "returned NoneType None")]
    for fn, msg in cases:
        with pytest.raises(RewardFunctionError, match=msg) as e:
            RewardSet([brevity, fn]).score(rows, resp, group_size=2)
        assert "\n" not in str(e.value)                                 # one line: the command line prints it as it is
    with pytest.raises(RewardFunctionError, match=r"`accuracy` raised KeyError: 'solution' .called on a batch of 4 completions "
                                                  r"with columns \['answer'\]"):
        RewardSet([accuracy]).score(rows, resp, group_size=2)        # the column a function needs is not in the data
    with pytest.raises(RewardFunctionError, match="missing 1 required positional argument: 'solution'"):
        RewardSet([chat_accuracy]).score([{"prompt": CHAT}], ["5"])
    with pytest.raises(RewardFunctionError, match="parsed function `three` returned 3 values"):
        RewardSet([brevity], parsed=three).score(rows, resp, group_size=2)
    with pytest.raises(RewardFunctionError, match="parsed function `strings` returned str '1'"):
        RewardSet([brevity], parsed=strings).score(rows, resp, group_size=2)
    with pytest.raises(ValueError, match="`weights` has 1 values for 2 reward functions"):
        RewardSet([brevity, three], weights=[1.0])
    with pytest.raises(ValueError, match="`weights` must be finite real numbers"):
        RewardSet([brevity], weights=[float("nan")])
    with pytest.raises(ValueError, match="`weights` must be a list of numbers"):
        RewardSet([brevity], weights=1.0)
    with pytest.raises(ValueError, match="`funcs` is empty"):
        RewardSet([])
    with pytest.raises(RewardFunctionError, match="must look like"):
        RewardSet(["brevity"])
    with pytest.raises(ValueError, match=r"`responses` must hold len\(rows\)\*group_size = 2\*2 strings, got 3"):
        RewardSet([brevity]).score(rows, resp[:3], group_size=2)
    with pytest.raises(ValueError, match="mixes string and conversational prompts"):
        RewardSet([brevity]).score([{"prompt": "a"}, {"prompt": CHAT}], ["x", "y"])
    with pytest.raises(ValueError, match="`rows` row 0 has no `prompt` column"):
        RewardSet([brevity]).score([{"question": "a"}], ["x"])


def test_all_none_warns_and_gives_zero():
    def never(prompts, completions, **kw): return [None] * len(prompts)
    def sometimes(prompts, completions, **kw): return [1.0 if i % 2 else None for i in range(len(prompts))]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = RewardSet([never, sometimes], weights=[1.0, 3.0]).score([{"prompt": "a"}, {"prompt": "b"}], ["1", "2", "3", "4"], 2)
    assert out["reward"].tolist() == [0.0, 3.0, 0.0, 3.0]
    assert any("every reward function returned None for 2 of 4 completions (first: completion 0, row 0" in str(x.message) for x in w)


def test_async_reward_function():
    async def judge(prompts, completions, **kw): return [float(len(c)) for c in completions]
    assert RewardSet([judge]).rewards([{"prompt": "a"}], ["xy", "z"], 2)[0].tolist() == [2.0, 1.0]


def test_config_rebuilds_module_level_functions():
    rs = RewardSet([brevity, math.isfinite], weights=[0.5, 2.0])
    again = RewardSet(**rs.config())
    assert again.funcs == rs.funcs and again.weights == rs.weights and again.names == rs.names


# ---- properties

_cell = st.one_of(st.none(), st.floats(-100, 100, allow_nan=False, width=32), st.booleans(), st.integers(-5, 5))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), k=st.integers(1, 4), n=st.integers(1, 4), g=st.integers(1, 3))
def test_weighted_sum_of_non_none_values(data, k, n, g):
    B = n * g
    table = data.draw(st.lists(st.lists(_cell, min_size=B, max_size=B), min_size=k, max_size=k))   # (K, B)
    weights = data.draw(st.lists(st.floats(-4, 4, allow_nan=False, width=32), min_size=k, max_size=k))
    funcs = []
    for i, col in enumerate(table):
        def f(prompts, completions, _col=col, **kw): return list(_col)
        f.__name__ = f"f{i}"
        funcs.append(f)
    rows = [{"prompt": f"p{i}", "idx": i} for i in range(n)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                 # all None in a row warns; tested above
        out = RewardSet(funcs, weights=weights).score(rows, [str(j) for j in range(B)], group_size=g)
        doubled = RewardSet(funcs, weights=[2 * w for w in weights]).score(rows, [str(j) for j in range(B)], group_size=g)
    for i, col in enumerate(table):                                    # NaN exactly where a function returned None
        assert [math.isnan(v) for v in out["per_func"][f"f{i}"].tolist()] == [v is None for v in col]
    # the reward is linear in the weights over the values that are not None; all None gives 0
    R = torch.tensor([[math.nan if v is None else float(v) for v in col] for col in table], dtype=torch.float32).T  # (B, K)
    want = torch.where(torch.isnan(R), torch.zeros(()), R) @ torch.tensor(weights, dtype=torch.float32)
    torch.testing.assert_close(out["reward"], want, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(out["reward"], _trl_combine(R, weights), rtol=0, atol=0)
    torch.testing.assert_close(doubled["reward"], 2 * out["reward"], rtol=1e-6, atol=1e-4)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 60), frac=st.floats(0.01, 0.99), seed=st.integers(0, 2**31 - 1))
def test_held_out_split_property(n, frac, seed):
    ds = Dataset.from_list([{"prompt": f"p{i}"} for i in range(n)])
    train, test = load_dataset_splits(ds, test_frac=frac, seed=seed)
    assert len(test) == min(max(1, math.ceil(frac * n)), n - 1) and len(train) + len(test) == n
    assert sorted(list(train["prompt"]) + list(test["prompt"])) == sorted(ds["prompt"])


def test_format_hint_only_for_format_errors():
    "The chat-format hint is added only when the error is about the prompt format, not to every TypeError or KeyError of a reward."
    from rl_notes.data import _format_hint
    chat = [[{"role": "user", "content": "x"}]]
    assert "the prompts are strings" in _format_hint(["a"], TypeError("string indices must be integers, not 'str'"))
    assert "the prompts are chat messages" in _format_hint(chat, AttributeError("'list' object has no attribute 'lower'"))
    for prompts, e in ((["a"], TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")), (chat, KeyError("answer")),
                       (["a"], KeyError("answer")), (chat, IndexError("list index out of range"))):
        assert _format_hint(prompts, e) == "", (prompts, e)
