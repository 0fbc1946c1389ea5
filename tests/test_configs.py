"""rl_notes.configs against the installed TRL: GRPO_DEFAULTS holds GRPOConfig's defaults of the options rl_notes has no field for,
and `trl_config_options` reads a real GRPOConfig dump."""
import dataclasses, enum, json
import pytest

trl = pytest.importorskip("trl")
from rl_notes.configs import GRPO_DEFAULTS, TRL_OTHER, trl_config_options


def _declared(f):
    v = f.default if f.default is not dataclasses.MISSING else f.default_factory() if f.default_factory is not dataclasses.MISSING else None
    return v.value if isinstance(v, enum.Enum) else v


def test_grpo_defaults_are_trls():
    "Every option of the table is GRPOConfig's, its declared default is in the table, and so is what to_dict() writes for it."
    fields = {f.name: f for f in dataclasses.fields(trl.GRPOConfig)}
    dumped = json.loads(json.dumps(trl.GRPOConfig(output_dir="/tmp/x", use_cpu=True, bf16=False).to_dict(), default=str))
    assert set(GRPO_DEFAULTS) <= set(fields) and set(GRPO_DEFAULTS) <= set(TRL_OTHER) | {"bf16", "fp16"}
    for k, vals in GRPO_DEFAULTS.items():
        assert _declared(fields[k]) in vals, k
        if k in ("use_cpu", "bf16", "disable_tqdm"): continue               # set by the machine a GRPOConfig is made on
        v = dumped[k]
        assert v in vals or (isinstance(v, list) and tuple(v) in [tuple(x) for x in vals if isinstance(x, (list, tuple))]), k


def test_a_default_dump_keeps_only_what_rl_notes_reads():
    d = json.loads(json.dumps(trl.GRPOConfig(output_dir="/tmp/x", use_cpu=True, bf16=False).to_dict(), default=str))
    opts, notes = trl_config_options(d)
    assert not set(opts) & set(TRL_OTHER), sorted(set(opts) & set(TRL_OTHER))      # nothing left to refuse or ignore
    assert "generation_batch_size" not in opts and "vllm_importance_sampling_mode" not in opts and "max_steps" not in opts
    assert notes == ["use_cpu: the run goes where accelerate puts it"]
