"""The `math` task: answers extracted from `####` lines and `\\boxed{}`, compared by math-verify; its reward set as TRL calls it."""
import json, sys, threading

import pytest
import torch

pytest.importorskip("math_verify")

from datasets import Dataset, DatasetDict

from rl_notes.data import RewardFunctionError, RewardSet
from rl_notes.tasks import (MATH_INSTRUCTION, TASKS, Math, TaskUnsupported, extract_answer, get_task, gold_answer, last_boxed,
                            math_equal, parse_answer, parse_response)
import rl_notes.tasks as tasks

GSM = [
    {"question": "Ann has 40 apples and eats 2. How many are left?", "answer": "40 - 2 = <<40-2=38>>38\n#### 38"},
    {"question": "A bike costs $1,000 and a helmet $234. Together?", "answer": "1000 + 234 = <<1000+234=1234>>1234\n#### 1,234"},
    {"question": "Bo reads 3 pages a day for 4 days. How many pages?", "answer": "3 * 4 = <<3*4=12>>12\n#### 12"},
    {"question": "Cy has 10 coins and loses 7. How many are left?", "answer": "10 - 7 = <<10-7=3>>3\n#### 3"},
    {"question": "Half of a 1 litre bottle is how many litres?", "answer": "1 / 2 = 0.5\n#### 0.5"},
]
MATH = [
    {"problem": "What is $1/2$ of $1$?", "solution": r"Half of one is $\boxed{\frac{1}{2}}$."},
    {"problem": "Simplify $2/6$.", "solution": r"$\frac{2}{6} = \boxed{\frac{1}{3}}$"},
    {"problem": "Expand $(x+1)^2 - 2x$.", "solution": r"$x^2 + 2x + 1 - 2x = \boxed{x^2+1}$"},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def gsm(tmp_path): return _jsonl(tmp_path / "gsm.jsonl", GSM)


@pytest.fixture
def boxed(tmp_path): return _jsonl(tmp_path / "math.jsonl", MATH)


def _conv(text): return [{"role": "assistant", "content": text}]


# ---- extraction and verification

@pytest.mark.parametrize("response, answer", [
    ("3 + 4 = 7\n#### 7", "7"), ("#### 1,234", "1234"), ("#### $18 dollars.", "18"), ("#### -3", "-3"),
    (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"), (r"\boxed{x^{2}+1}", "x^{2}+1"), (r"#### 3 then \boxed{4}", "4"),
    ("\\boxed{4}\n#### 3", "3"), (r"\boxed{1} \boxed{2", "1"), ("the answer is 7", None), ("####", None), (r"\boxed{", None),
])
def test_extract_answer(response, answer):
    assert extract_answer(response) == answer


@pytest.mark.parametrize("gold, response, ok", [
    ("38", "38 apples are left.\n#### 38", True),
    ("1234", "#### 1,234", True),                       # thousands separator in the response
    ("#### 1,234", "#### 1234", True),                  # ... and in the gold answer (a raw GSM8K answer)
    ("1234", r"The total is \boxed{1234}.", True),
    (r"\frac{1}{2}", "#### 0.5", True),                 # a fraction equals its decimal
    (r"\frac{1}{2}", r"\boxed{0.5}", True),
    ("0.5", r"\boxed{\frac{1}{2}}", True),
    (r"\frac{1}{2}", r"\boxed{\dfrac{2}{4}}", True),
    ("x^2+1", r"\boxed{1 + x^{2}}", True),              # expressions compared symbolically
    (r"\frac{1}{2}", r"\boxed{\frac{1}{3}}", False),
    ("38", "#### 37", False),
    ("38", "The answer is 38.", True),                  # no marker: math-verify's own extraction
    ("38", "I am not sure.", False),
])
def test_math_verify(gold, response, ok):
    assert math_equal(parse_answer(gold_answer({"answer": gold})), parse_response(response)) is ok


def test_verify_reward_and_parsed(gsm):
    m = Math(data_files=gsm)
    assert m.verify("1234", "#### 1,234") == (1.0, True)
    assert m.verify("1234", "#### 1,243") == (0.0, True)           # wrong, but an answer was stated
    assert m.verify("1234", "I cannot tell.") == (0.0, False)      # nothing to extract
    assert m.verify({"solution": r"so \boxed{\frac{1}{2}}"}, "#### 0.5") == (1.0, True)


def test_gold_answer():
    assert gold_answer({"answer": "48 / 2 = 24\n#### 1,224"}) == "1224"
    assert gold_answer({"answer": 42}) == "42"
    assert gold_answer({"answer": r"\frac{14}{3}"}) == r"\frac{14}{3}"
    assert gold_answer({"solution": r"So $x = \boxed{\frac{1}{2}}$."}) == r"\frac{1}{2}"
    assert last_boxed(r"\fbox{5}") == "5"


# ---- the task: rows, splits, prompts

def test_rows_and_splits(gsm):
    m = get_task("math", data_files=gsm)
    assert TASKS["math"] is Math
    train, test = m.splits(100, 100)                               # more than the file holds: all rows, no error
    assert (len(train), len(test)) == (4, 1)
    assert not set(train["question"]) & set(test["question"])
    assert sorted(m.dataset(10, split=None)["answer"]) == sorted(["38", "1234", "12", "3", "0.5"])
    assert m.dataset(3, seed=1)["question"] == m.dataset(3, seed=1)["question"]
    assert len(m.dataset(2)) == 2
    row = m.dataset(10, split=None).filter(lambda r: r["answer"] == "1234")[0]
    assert row["prompt"] == [{"role": "user", "content": GSM[1]["question"] + "\n\n" + MATH_INSTRUCTION}]
    assert row["solution"] == GSM[1]["answer"]
    assert m.verify(row, m.demonstration(row)) == (1.0, True)
    plain = Math(data_files=gsm, chat=False).dataset(1)[0]["prompt"]
    assert isinstance(plain, str) and plain.endswith(MATH_INSTRUCTION)
    assert get_task(**m.config()).config() == m.config()
    assert m.required_columns == ("answer",)


def test_prompt_column_and_saved_dataset_dict(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": f"{i}+{i}?"}], "answer": f"#### {2 * i}"} for i in range(6)]
    path = tmp_path / "saved"
    DatasetDict({"train": Dataset.from_list(rows[:4]), "test": Dataset.from_list(rows[4:])}).save_to_disk(str(path))
    m = Math(data_files=path)
    train, test = m.splits(10, 10)
    assert sorted(test["answer"]) == ["10", "8"]                   # the directory's own test split
    assert train[0]["prompt"][0]["content"].endswith("?")          # a given prompt is used as it is
    for r in test: assert m.verify(r, f"#### {r['answer']}") == (1.0, True)


def test_boxed_layout_and_demonstrations(boxed):
    m = Math(data_files=boxed)
    rows = list(m.dataset(10, split=None))
    assert sorted(r["answer"] for r in rows) == sorted([r"\frac{1}{2}", r"\frac{1}{3}", "x^2+1"])
    for r in rows: assert m.verify(r, m.demonstration(r)) == (1.0, True)


# ---- the reward set, called as TRL calls it

def test_reward_set_on_conversational_completions(gsm):
    m = Math(data_files=gsm)
    rs = m.reward_set()
    assert rs.names == ["correctness"] and rs.weights == [1.0]
    f = rs.funcs[0]
    # TRL: conversational completions, every dataset column by name, and arguments that are not columns
    out = f(prompts=[[{"role": "user", "content": "q"}]] * 3,
            completions=[_conv("#### 1,234"), _conv(r"\boxed{1234}"), _conv("#### 12")],
            answer=["1234"] * 3, question=["q"] * 3, completion_ids=[[1], [2], [3]], trainer_state=None)
    assert out == [1.0, 1.0, 0.0]
    assert rs.parsed(prompts=["q"], completions=[_conv("no idea")], answer=["1"]) == [False]


def test_reward_set_equals_rewards(gsm):
    m = Math(data_files=gsm)
    rows = list(m.dataset(10, split=None))
    # G = 3 per row: the worked solution, a wrong answer, no answer
    responses = [x for r in rows for x in (r["solution"], "#### 99999", "I do not know")]
    want = m.rewards(rows, responses, 3)
    s = m.reward_set().score(rows, responses, 3)
    assert want[0].tolist() == [1.0, 0.0, 0.0] * len(rows)
    assert want[1].tolist() == [True, True, False] * len(rows)
    assert torch.equal(s["reward"], want[0]) and torch.equal(s["parsed"], want[1])
    assert torch.equal(s["per_func"]["correctness"], want[0])


def test_format_reward(boxed):
    m = Math(data_files=boxed, format_weight=0.25)
    rs = m.reward_set()
    assert rs.names == ["correctness", "format"] and rs.weights == [1.0, 0.25]
    half = m.dataset(10, split=None).filter(lambda r: r["answer"] == r"\frac{1}{2}")[0]
    s = rs.score([half], ["work...\n#### 0.5", r"\boxed{2}", "it is 0.5", "#### 0.5\nand more text"], 4)
    assert s["per_func"]["format"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert s["per_func"]["correctness"].tolist() == [1.0, 0.0, 1.0, 1.0]
    assert s["reward"].tolist() == [1.25, 0.25, 1.0, 1.0]
    assert m.format_score("#### 3\n") == 1.0 and m.format_score("####\n") == 0.0


def test_agrees_with_trl_accuracy_reward(boxed):
    trl_rewards = pytest.importorskip("trl.rewards")
    m = Math(data_files=boxed)
    rows = list(m.dataset(10, split=None))
    responses = [r"so $\boxed{\frac{1}{2}}$", r"$\boxed{0.5}$", r"$\boxed{\frac{1}{3}}$", r"$\boxed{x^2+1}$"]
    for r in rows:
        ours = m.reward_set().funcs[0](prompts=[r["prompt"]] * 4, completions=[_conv(t) for t in responses],
                                       answer=[r["answer"]] * 4)
        theirs = trl_rewards.accuracy_reward(completions=[_conv(t) for t in responses], solution=[r["solution"]] * 4)
        assert ours == theirs, (r["answer"], ours, theirs)


def test_works_outside_the_main_thread(gsm):
    m, out = Math(data_files=gsm), []
    t = threading.Thread(target=lambda: out.append(m.verify("77", r"\boxed{77}")))
    t.start(); t.join()
    assert out == [(1.0, True)]                                     # math-verify's signal-based timeout is off there


# ---- bad input

def test_errors(tmp_path, gsm):
    with pytest.raises(ValueError, match="`data_files` is required"): get_task("math")
    with pytest.raises(ValueError, match="does not exist"): Math(data_files=tmp_path / "missing.jsonl")
    noq = _jsonl(tmp_path / "noq.jsonl", [{"text": "2+2?", "answer": "#### 4"}] * 2)
    with pytest.raises(ValueError, match=r"no `prompt`, `question` or `problem` column; its columns: \['text', 'answer'\]"):
        Math(data_files=noq)
    noa = _jsonl(tmp_path / "noa.jsonl", [{"question": "2+2?", "label": 4}] * 2)
    with pytest.raises(ValueError, match="no `answer` or `solution` column"): Math(data_files=noa)
    empty = _jsonl(tmp_path / "empty.jsonl", [{"question": "2+2?", "answer": "#### 4"}, {"question": "3+3?", "answer": "six ####"}])
    with pytest.raises(ValueError, match="row 1: `answer` 'six ####' holds no answer"): Math(data_files=empty)
    nobox = _jsonl(tmp_path / "nobox.jsonl", [{"problem": "1+1?", "solution": r"\boxed{2}"}, {"problem": "2+2?", "solution": "It is 4."}])
    with pytest.raises(ValueError, match=r"row 1: `solution` 'It is 4.' has no \\boxed"): Math(data_files=nobox)
    bad = _jsonl(tmp_path / "bad.jsonl", [{"question": "2+2?", "answer": "4"}, {"question": "?", "answer": "\\frac{"}])
    with pytest.raises(ValueError, match=r"`answer` '\\\\frac\{' \(train\+test row \d of .*bad.jsonl'\): math-verify cannot parse"):
        Math(data_files=bad).dataset(2, split=None)
    one = _jsonl(tmp_path / "one.jsonl", [{"question": "2+2?", "answer": "#### 4"}])
    with pytest.raises(ValueError, match="one.jsonl"): Math(data_files=one)   # too few rows to hold one out
    with pytest.raises(ValueError, match="`format_weight` must be a number >= 0"): Math(data_files=gsm, format_weight=-1)
    with pytest.raises(ValueError, match="`chat` must be a bool"): Math(data_files=gsm, chat="yes")
    m = Math(data_files=gsm)
    with pytest.raises(ValueError, match="`n` must be a positive int"): m.dataset(0)
    with pytest.raises(ValueError, match="`split` must be one of"): m.dataset(2, split="valid")
    with pytest.raises(TaskUnsupported, match="no worked `solution`"): m.demonstration({"answer": "4"})
    with pytest.raises(NotImplementedError, match="pass `max_new_tokens`"): m.max_response_chars()
    with pytest.raises(ValueError, match=r"needs the column\(s\) \['answer'\]"):
        m.reward_set().funcs[0](prompts=["q"], completions=["#### 1"], solution=["1"])
    with pytest.raises(RewardFunctionError, match="correctness"):  # through a RewardSet: the error names the function
        RewardSet(m.reward_set().funcs).score([{"prompt": "q", "label": 1}], ["#### 1"])


def test_missing_math_verify_says_how_to_install(gsm, monkeypatch):
    m = Math(data_files=gsm)
    monkeypatch.setitem(sys.modules, "math_verify", None)       # `import math_verify` now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "rl_notes\[math\]"'): m.verify("98765", "#### 98765.25")
    with pytest.raises(ImportError, match=r'pip install "rl_notes\[math\]"'): tasks._load_math_verify()
