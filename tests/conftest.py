"""Fixtures shared by the test files: the micro SFT checkpoint (built once per session) and tiny random Llama models."""
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test of tens of seconds that runs a real trainer (`-m \"not slow\"` skips it)")


@pytest.fixture(scope="session")
def micro_sft(tmp_path_factory) -> str:
    "Directory of a micro SFT checkpoint: tiny Llama (hidden 32, 1 layer, 2 heads), 60 steps on 2-digit addition without scratchpad."
    from rl_notes.lab import sft_warm_start  # torch and transformers: only for the tests that ask for it
    from rl_notes.sft import SFTConfig
    cfg = SFTConfig(model_cfg=dict(hidden_size=32, num_layers=1, heads=2), steps=60, batch_size=32, eval_n=0, n_train=2000)
    return str(sft_warm_start("addition", cfg, cache_dir=tmp_path_factory.mktemp("sft"), progress=False, max_digits=2, scratchpad=False))


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
