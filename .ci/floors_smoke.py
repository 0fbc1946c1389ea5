#!/usr/bin/env python3
"""Smoke test of an installed rl_notes against whatever torch / transformers / accelerate the venv holds (run by
.ci/floors.sh with the declared floors): build a tiny model, save and load it, generate with both KV caches, and run
two steps of the trainer. Run it from outside the repository so that it imports the installed package."""
import os, sys, tempfile, time
t0 = time.time()
import torch, transformers, accelerate
import rl_notes
from rl_notes.models import build_tokenizer, tiny_llama, load_model
from rl_notes.rollout import generate
from rl_notes.trainconfig import TrainConfig
from rl_notes.trainer import train

assert "site-packages" in rl_notes.__file__, f"rl_notes imported from {rl_notes.__file__}, not from the installed package"
print(f"floors smoke: python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, "
      f"accelerate {accelerate.__version__}, rl_notes {rl_notes.__version__}", flush=True)
torch.set_num_threads(1)
with tempfile.TemporaryDirectory(prefix="rl_notes-floors-") as tmp:
    d = os.path.join(tmp, "tiny")
    tok = build_tokenizer()
    tiny_llama(tok, hidden_size=32, num_layers=1, heads=2, seed=0).save_pretrained(d)
    tok.save_pretrained(d)
    model, tok = load_model(d)                                                   # load
    for cache in ("dynamic", "static"):                                          # generate, both KV caches
        ro = generate(model, tok, ["1+2=", "3+4="], group_size=2, max_new_tokens=4, seed=0, cache=cache)
        assert ro.response_mask.shape[0] == 4 and torch.isfinite(ro.old_logp).all(), cache
    rows = train(TrainConfig(model=d, steps=2, n_prompts=2, group_size=2, max_new_tokens=3, n_train=50, n_eval=2,
                             progress=False, threads=1, out_dir=os.path.join(tmp, "run")))   # two train steps
    steps = sorted({r["step"] for r in rows if "step" in r})
    assert steps[-1] == 2, f"train logged steps {steps}, expected up to 2"
    assert os.path.isfile(os.path.join(tmp, "run", "metrics.jsonl"))
print(f"floors smoke: load, generate (dynamic and static cache), 2 train steps passed in {time.time() - t0:.1f}s")
