"A loss added from outside the library: registered in this file alone, picked by `Algo(loss=...)`, and trained for a step by the trainer."
import pytest, torch
from rl_notes.losses import register_policy_loss, register_adv_est, POLICY_LOSSES, LOSS_LOGS, ADVANTAGE_ESTIMATORS, CRITIC_ESTIMATORS
from rl_notes.trainconfig import Algo, TrainConfig


@pytest.fixture
def toy_loss():
    calls = []
    @register_policy_loss("test_toy_pg", logs=("n_tokens",))
    def toy(algo, logp, old_logp, ref_logp, adv, mask, max_tokens, global_tokens, reduce=None):
        "(1 + A) times the NLL of the sampled tokens, over the run's token divisor: no ratio, no clip (the 1 moves an untrained model whose rewards are all 0)."
        calls.append(int(mask.sum()))
        a = adv[:, None] if adv.dim() == 1 else adv
        return -((1 + a) * logp * mask).sum() / (global_tokens or mask.sum()), {"n_tokens": mask.sum().float()}
    yield calls
    POLICY_LOSSES.pop("test_toy_pg"); LOSS_LOGS.pop("test_toy_pg", None)


def test_a_registered_loss_trains_a_step(toy_loss, tmp_path):
    from rl_notes.models import build_tokenizer, tiny_llama
    from rl_notes.trainer import train
    tok = build_tokenizer(); tiny_llama(tok, hidden_size=32, num_layers=1, heads=2, seed=0).save_pretrained(tmp_path / "m"); tok.save_pretrained(tmp_path / "m")
    cfg = TrainConfig(model=str(tmp_path / "m"), algo=Algo(name="toy", loss="test_toy_pg", agg="token-mean"), out_dir=str(tmp_path / "run"),
                      task_kw=dict(max_digits=1, scratchpad=False), steps=1, n_prompts=2, group_size=2, max_new_tokens=3,
                      n_train=20, n_eval=0, progress=False, lr=1e-2)
    before = {k: v.clone() for k, v in tiny_llama(tok, hidden_size=32, num_layers=1, heads=2, seed=0).state_dict().items()}
    rows = train(cfg)
    assert toy_loss, "the trainer never called the registered loss"
    assert rows[-1]["step"] == 1 and rows[-1]["test_toy_pg/n_tokens"] > 0       # its own metric, logged under its name
    from transformers import AutoModelForCausalLM
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model").state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before if k in after)   # the step moved the weights


def test_registering_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="policy loss 'clip' is already registered"):
        register_policy_loss("clip")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="advantage estimator 'gae' is already registered"):
        register_adv_est("gae")(lambda *a, **k: None)


def test_a_registered_estimator_with_a_critic_gets_one():
    @register_adv_est("test_toy_gae", critic=True)
    def est(algo, batch, reduce=None): return ADVANTAGE_ESTIMATORS["gae"](algo, batch, reduce)
    try:
        assert Algo(adv="test_toy_gae").uses_critic and "test_toy_gae" in CRITIC_ESTIMATORS
    finally:
        ADVANTAGE_ESTIMATORS.pop("test_toy_gae"); CRITIC_ESTIMATORS.remove("test_toy_gae")
    with pytest.raises(ValueError, match="Algo.adv must be one of"):
        Algo(adv="test_toy_gae")
