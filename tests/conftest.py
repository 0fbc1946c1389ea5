"""Fixtures shared by the test files: the micro SFT checkpoint (built once per session) and tiny random Llama models; the
markers of the tests that take long (`pytest -m "not torchrun and not many_runs"` for a quick pass; `make test` runs them all)."""
import pytest

MARKERS = {
    "slow": "a test of tens of seconds that runs a real trainer (`-m \"not slow\"` skips it)",
    "torchrun": "launches processes with torchrun (two CPU processes over gloo; tens of seconds each)",
    "many_runs": "trains many runs (several trainer runs or a parametrised family of them; tens of seconds)",
    "wheel": "builds the wheel with `pip wheel` in an isolated build environment",
}


def pytest_configure(config):
    for name, what in MARKERS.items(): config.addinivalue_line("markers", f"{name}: {what}")


# The micro SFT start every trainer test begins from: one tiny Llama, 60 steps on 1-2 digit addition without scratchpad.
MICRO_SFT = dict(model_cfg=dict(hidden_size=32, num_layers=1, heads=2), steps=60, batch_size=32, eval_n=0, n_train=2000)
MICRO_TASK = dict(max_digits=2, scratchpad=False)


@pytest.fixture(scope="session")
def micro_sft(tmp_path_factory) -> str:
    """Directory of the micro SFT checkpoint (`MICRO_SFT` on `MICRO_TASK`), trained once per test session into the session's
    temporary directory (`sft_warm_start`'s on-disk cache: every test, in every file, gets the same directory)."""
    from rl_notes.lab import sft_warm_start  # torch and transformers: only for the tests that ask for it
    from rl_notes.sft import SFTConfig
    root = tmp_path_factory.mktemp("micro_sft", numbered=False)
    return str(sft_warm_start("addition", SFTConfig(**MICRO_SFT), cache_dir=root, progress=False, **MICRO_TASK))


@pytest.fixture(scope="session")
def tiny_lm():
    "A factory of tiny random Llama causal LMs (1 layer, hidden 32, vocabulary V); seeded, so every call gives the same weights."
    def make(V=40):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=32))
    return make


def make_chat_world(root, rewards:str):
    "Under `root`: a tiny chat model directory (`model`), a conversational jsonl dataset (`chat.jsonl`) and `rewards.py` holding `rewards`."
    import json
    from rl_notes.models import save_tiny_chat_model
    save_tiny_chat_model(root / "model", vocab_size=300, hidden_size=32, num_layers=1)
    with open(root / "chat.jsonl", "w") as f:
        for i in range(16): f.write(json.dumps({"prompt": [{"role": "user", "content": f"What is {i}+1?"}], "answer": str(i + 1)}) + "\n")
    (root / "rewards.py").write_text(rewards)
    return root


def trl_grpo_script(tmp_path, **cfg) -> str:
    "The opening of a script that trains TRL's GRPOTrainer on CPU (a tiny random Llama in tmp_path/model, output in tmp_path/run): it defines `md`, `tok`, `digits` (a reward), `cfg` (a GRPOConfig: these defaults, updated by `cfg`) and `ds`."
    args = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=8, learning_rate=1e-3, beta=0.04, max_steps=8,
                logging_steps=1, report_to="none", use_cpu=True, save_strategy="no", seed=0, disable_tqdm=True, dataloader_num_workers=0)
    args.update(cfg)
    return f"""
import torch; torch.set_num_threads(1)
from datasets import Dataset
from transformers.utils import logging; logging.set_verbosity_error()
from trl import GRPOConfig, GRPOTrainer
from rl_notes.models import build_tokenizer, tiny_llama
tok = build_tokenizer(); md = {str(tmp_path / 'model')!r}
tiny_llama(tok, hidden_size=32, num_layers=1, heads=2).save_pretrained(md); tok.save_pretrained(md)
def digits(prompts, completions, **kw): return [sum(c.isdigit() for c in x) / max(len(x), 1) for x in completions]
cfg = GRPOConfig(output_dir={str(tmp_path / 'run')!r}, **{args!r})
ds = Dataset.from_dict({{"prompt": [f"{{a}}+{{b}}=" for a in range(4) for b in range(4)]}})
"""


# ---- the command line with the trainer stubbed (tests of options and spellings) ----

class _Rows(list):
    metrics_file, model_dir = "metrics.jsonl", None


@pytest.fixture
def cli_cfg(monkeypatch, tmp_path, capsys):
    "`main(['train', '--model', DIR, *args])` with the trainer replaced by a stub: (exit code, the TrainConfig it got or None, stdout, stderr)."
    import rl_notes.trainer
    got = {}
    def fake_train(cfg, acc=None): got["cfg"] = cfg; return _Rows()
    monkeypatch.setattr(rl_notes.trainer, "train", fake_train)
    (tmp_path / "model").mkdir(exist_ok=True)
    def run(*args):
        got.clear()
        from rl_notes.cli import main
        code = main(["train", "--model", str(tmp_path / "model"), "--output-dir", str(tmp_path / "run"), *map(str, args)])
        out, err = capsys.readouterr()
        return code, got.get("cfg"), out, err
    return run
