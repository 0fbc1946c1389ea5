"The `rl_notes` console script, through a subprocess: help, one-line errors with exit status 2, one run per directory, a quick demo."
import json, os, subprocess, sys, warnings
from pathlib import Path
import pytest

BIN = Path(sys.executable).parent / "rl_notes"
CMD = [str(BIN)] if BIN.exists() else [sys.executable, "-c", "import sys; from rl_notes.cli import main; sys.exit(main())"]

def run(*args, timeout=300):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    return subprocess.run(CMD + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)

def one_line_error(r, msg):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("rl_notes: error:"), r.stderr
    assert msg in lines[0], lines[0]

def test_help():
    r = run("--help")
    assert r.returncode == 0
    for cmd in ("sft", "train", "eval", "plot", "demo"): assert cmd in r.stdout
    r = run("train", "--help")
    assert r.returncode == 0 and "--algo" in r.stdout and "dapo" in r.stdout and "--task-arg" in r.stdout and "--overwrite" in r.stdout
    text = " ".join(r.stdout.split())                                  # argparse wraps at the terminal width
    assert "--steps STEPS, --max-steps STEPS RL steps (one rollout batch each) (default 100)" in text   # type, help and default from TrainConfig; TRL's name as an alias
    for old in ("--out", "--quiet", "--no-shard", "--group-size", "--max-new-tokens", "--lr"): assert old in text   # option names kept
    sections = [text.index(f"{g} options:") for g in ("model and data", "algorithm", "generation", "optimisation", "evaluation and logging")]
    assert sections == sorted(sections)
    r = run("sft", "--help")
    assert "--steps STEPS most optimiser steps (the cosine schedule spans them) (default 1000)" in " ".join(r.stdout.split())

@pytest.mark.parametrize("cmd", [[], ["train"], ["sft"]])
def test_help_imports_nothing_heavy(cmd):
    "`rl_notes --help` and `rl_notes train --help` must answer at once: the parser loads neither torch nor the trainer."
    code = (f"import sys; from rl_notes.cli import main\ntry: main({cmd + ['--help']!r})\nexcept SystemExit: pass\n"
            "print(sorted(m for m in ('torch', 'transformers', 'accelerate', 'rl_notes.trainer', 'numpy') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.splitlines()[-1] == "[]", r.stdout + r.stderr

def test_options_are_the_config_fields():
    "Every field of TrainConfig and SFTConfig is an option (name, type, default and help from the source) or written by hand."
    import dataclasses
    from rl_notes.cli import PRESET_NAMES, SFT_HAND, TRAIN_HAND, _parser, config_fields
    from rl_notes.sft import SFTConfig
    from rl_notes.trainconfig import PRESETS, TrainConfig
    assert list(PRESET_NAMES) == sorted(PRESETS)
    for C, hand, cmd in ((TrainConfig, TRAIN_HAND, "train"), (SFTConfig, SFT_HAND, "sft")):
        q = _parser(cmd)._subparsers._group_actions[0].choices[cmd]
        dests = {a.dest for a in q._actions}
        for f in dataclasses.fields(C):
            assert f.name in dests or f.name in hand, f"{C.__name__}.{f.name} is no option of `rl_notes {cmd}`"
            if f.name in dests and f.name not in hand:
                d = f.default if f.default is not dataclasses.MISSING else f.default_factory()
                assert config_fields(C.__name__)[f.name].default == d
                act = next(a for a in q._actions if a.dest == f.name)
                assert act.type is None or f"(default {d})" in act.help, (f.name, act.help)
    q = _parser("train")._subparsers._group_actions[0].choices["train"]
    hand_defaults = {a.dest: a.default for a in q._actions if a.dest in ("task", "algo", "dataset")}
    assert hand_defaults == {"task": None, "algo": "==SUPPRESS==", "dataset": TrainConfig.dataset}   # the options written by hand agree too
    # --algo left out: TrainConfig.algo with the lab's defaults, or GRPOConfig's under TRL's spelling (`cli.trl_mode`)
    assert f"default: {TrainConfig.algo} with the lab's defaults" in next(a for a in q._actions if a.dest == "algo").help
    # --task left out is None (so that --dataset without --reward can be refused), which `rl_notes train` turns into TrainConfig.task
    assert f"default: {TrainConfig.task}" in next(a for a in q._actions if a.dest == "task").help

# errors argparse finds (no heavy import): through the console script
@pytest.mark.parametrize("args,msg", [
    (("train", "--algo", "reinforce", "--model", "."), "invalid choice: 'reinforce'"),
    (("train",), "the following arguments are required: --model"),
    (("train", "--model", ".", "--steps", "ten"), "argument --steps/--max-steps: invalid int value: 'ten'"),
    (("frobnicate",), "invalid choice: 'frobnicate'"),
    # and two that the config finds, end to end
    (("train", "--model", ".", "--warmup-steps", "-5"), "TrainConfig.warmup_steps must be an int >= 0, got -5"),
    (("train", "--model", ".", "--set", "dynamic_sampling=maybe"), "Algo.dynamic_sampling must be a bool, got 'maybe'"),
])
def test_errors_are_one_line(args, msg):
    one_line_error(run(*args), msg)

# errors the task, the config or the trainer finds: through `rl_notes.cli.main` in this process (the console script is
# `sys.exit(main())`), so that each case does not pay for importing torch again
@pytest.mark.parametrize("args,msg", [
    (("train", "--task", "sorting", "--model", "."), "unknown task 'sorting'"),
    (("train", "--model", "/no/such/model"), "--model '/no/such/model': no such directory"),
    (("eval", "--model", "/no/such/model"), "no such directory"),
    (("train", "--model", ".", "--set", "clip=0.3"), "unknown Algo field"),
    (("train", "--model", ".", "--task-arg", "digits=3"), "bad arguments for task 'addition'"),
    (("train", "--model", ".", "--algo", "grpo", "--critic-init", "rm"), "TrainConfig.critic_init is set ('rm') but algo 'grpo' has no critic"),
    (("train", "--model", ".", "--eval-every", "-1"), "TrainConfig.eval_every must be an int >= 0, got -1"),
    (("train", "--model", ".", "--save-every", "-1"), "TrainConfig.save_every must be an int >= 0, got -1"),
    (("train", "--model", ".", "--threads", "-3"), "TrainConfig.threads must be an int >= 1 or None, got -3"),
    (("train", "--model", ".", "--lr", "inf"), "TrainConfig.lr must be a finite float >= 0, got inf"),
    (("train", "--model", ".", "--out", __file__), f"TrainConfig.out_dir must be a directory path, but {__file__!r} is a file"),
    (("train", "--model", ".", "--set", "eps_high=0.3x"), "Algo.eps_high must be a finite float >= 0, got '0.3x'"),
    (("train", "--model", ".", "--set", "max_rounds=2.5"), "Algo.max_rounds must be an int >= 1, got 2.5"),
    (("train", "--model", ".", "--resume", "--overwrite"), "resume and overwrite exclude each other"),
    (("sft", "--model-arg", "hidden_size=abc"), "tiny_llama.hidden_size must be an int, got 'abc'"),
    (("sft", "--task-arg", "scratchpad=maybe"), "`scratchpad` must be a bool, got 'maybe'"),
    (("demo", "--threads", "-3"), "`threads` must be an int >= 1 or None, got -3"),
    (("plot", "/no/such/run"), "no metrics.jsonl"),
])
def test_config_errors_are_one_line(args, msg, capsys):
    from rl_notes.cli import main
    code = main([str(a) for a in args])
    err = capsys.readouterr().err
    one_line_error(subprocess.CompletedProcess(args, code, "", err), msg)

@pytest.mark.many_runs
def test_one_run_per_directory_and_divergence(micro_sft, tmp_path):
    args = ["train", "--model", micro_sft, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false", "--n-prompts", "2",
            "--group-size", "4", "--max-new-tokens", "3", "--n-eval", "4", "--n-train", "200", "--quiet", "--threads", "1",
            "--set", "soft_overlong=true", "--set", "cache_len=2", "--out", tmp_path / "run"]
    r = run(*args, "--steps", "2", "--save-every", "1"); assert r.returncode == 0, r.stderr[-2000:]
    one_line_error(run(*args, "--steps", "2"), "holds a previous run")                     # never silently replaced
    r = run(*args, "--steps", "3", "--resume"); assert r.returncode == 0, r.stderr[-2000:]  # continued
    assert [json.loads(l)["step"] for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2, 3]
    r = run(*args, "--steps", "1", "--overwrite"); assert r.returncode == 0, r.stderr[-2000:]
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2
    one_line_error(run(*args[:-1], tmp_path / "div", "--steps", "3", "--lr", "1e30"), "training diverged at step 2")

@pytest.mark.many_runs
def test_quick_demo_sft_train_eval_plot(tmp_path):
    r = run("demo", "--quick", "--quiet", "--out", tmp_path / "demo", "--cache-dir", tmp_path / "cache", "--threads", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    for f in ("grpo/metrics.jsonl", "dapo/metrics.jsonl", "curves.png", "summary.md"): assert (tmp_path / "demo" / f).is_file(), f
    assert "| grpo |" in (tmp_path / "demo" / "summary.md").read_text()
    # sft is cached: the same command prints the demo's checkpoint directory again at once
    r = run("sft", "--task-arg", "max_digits=4", "--task-arg", "scratchpad=true", "--steps", "30", "--n-train", "20000", "--cache-dir", tmp_path / "cache")
    assert r.returncode == 0, r.stderr[-2000:]
    model = r.stdout.strip().splitlines()[-1]
    assert Path(model).is_dir()
    r = run("train", "--algo", "dr_grpo", "--model", model, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false",
            "--steps", "2", "--n-prompts", "2", "--group-size", "2", "--max-new-tokens", "4", "--n-eval", "4", "--n-train", "200", "--quiet",
            "--out", tmp_path / "run", "--set", "eps_high=0.3")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["algo"]["eps_high"] == 0.3
    r = run("train", "--algo", "cispo", "--model", model, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false",   # a family preset
            "--steps", "1", "--n-prompts", "2", "--group-size", "2", "--max-new-tokens", "4", "--n-eval", "0", "--n-train", "200", "--quiet",
            "--out", tmp_path / "cispo", "--set", "tis=token_truncate")
    assert r.returncode == 0, r.stderr[-2000:]
    cfg = json.loads((tmp_path / "cispo" / "config.json").read_text())["algo"]
    assert (cfg["loss"], cfg["tis"]) == ("cispo", "token_truncate")
    r = run("eval", "--model", model, "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false", "--n", "8")
    assert r.returncode == 0 and 0 <= json.loads(r.stdout.strip().splitlines()[-1])["accuracy"] <= 1
    r = run("plot", tmp_path / "run", tmp_path / "demo" / "grpo", "--out", tmp_path / "p.png")
    assert r.returncode == 0 and (tmp_path / "p.png").is_file()
    r = run("demo", "--quick", "--quiet", "--out", tmp_path / "demo", "--sft", model, "--threads", "1")
    assert r.returncode == 0, r.stderr[-2000:]                      # the demo again (from the cached SFT): it replaces its own runs


# TRL's meanings on the command line: --bf16 is mixed precision, and TRL's spelling takes GRPOConfig's defaults for what it leaves out

def _weights(d):
    from safetensors.torch import load_file
    return {k: v.float() for k, v in load_file(str(Path(d) / "model.safetensors")).items()}

def test_bf16_is_mixed_precision_and_moves_the_weights(micro_sft, tmp_path, capsys):
    "At lr 1e-6, 3 steps: --bf16 (float32 weights, bf16 passes) moves as many weights as float32 does; --dtype bfloat16 moves few and says why."
    import torch
    from rl_notes.cli import main
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+{i}="}) + "\n" for i in range(40)))
    (tmp_path / "r.py").write_text("def digits(completions, **kw): return [sum(c.isdigit() for c in x) / 4 for x in completions]\n")
    base = ["train", "--model", micro_sft, "--dataset", str(tmp_path / "p.jsonl"), "--reward", f"{tmp_path / 'r.py'}:digits", "--n-prompts", "4",
            "--group-size", "4", "--max-new-tokens", "4", "--n-eval", "0", "--lr", "1e-6", "--steps", "3", "--quiet", "--threads", "1"]
    w0, moved, said = _weights(micro_sft), {}, {}
    for name, extra in (("fp32", []), ("bf16", ["--bf16"]), ("pure", ["--dtype", "bfloat16"])):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert main([*base, *extra, "--out", str(tmp_path / name)]) == 0
        said[name] = " ".join(str(w.message) for w in caught)
        w = _weights(tmp_path / name / "model")
        ref = {k: v.to(torch.bfloat16).float() for k, v in w0.items()} if name == "pure" else w0
        moved[name] = sum(int((w[k] != ref[k]).sum()) for k in w0) / sum(v.numel() for v in w0.values())
    print(moved)
    assert moved["bf16"] >= 0.99 * moved["fp32"] and moved["fp32"] > 0.5
    assert moved["pure"] < 0.5 * moved["fp32"]
    assert "dtype bfloat16 trains the weights themselves" in said["pure"] and "--bf16" in said["pure"]
    assert "trains the weights themselves" not in said["bf16"] + said["fp32"]

def test_trl_spelling_takes_grpoconfigs_defaults(cli_cfg):
    "TRL's spelling without --algo: GRPOConfig's defaults and batch arithmetic, the same with or without TRL's default values written."
    code, cfg, out, err = cli_cfg("--per-device-train-batch-size", 8, "--num-generations", 4)
    assert code == 0, err
    code2, cfg2, out2, err2 = cli_cfg("--per-device-train-batch-size", 8, "--num-generations", 4, "--gradient-accumulation-steps", 1)
    assert code2 == 0, err2
    for c in (cfg, cfg2):
        assert (c.n_prompts, c.group_size, c.micro_batch_size, c.n_minibatches) == (2, 4, 8, 1)     # 8 completions: 2 prompts x 4, as TRL
        assert (c.lr, c.lr_scheduler_type, c.max_new_tokens) == (1e-6, "linear", 512)
        assert (c.algo.beta, c.algo.agg, c.algo.eps_low, c.algo.eps_high, c.algo.adv) == (0.0, "token-mean", 0.2, 0.2, "group")
    line = next(l for l in out.splitlines() if l.startswith("rl_notes: defaults:"))
    assert "GRPOConfig's" in line and "--per-device-train-batch-size" in line and "2 prompts x 4" in line
    code, cfg, out, err = cli_cfg("--learning-rate", "1e-5", "--algo", "grpo")                    # --algo: the preset and the lab's defaults
    assert code == 0 and (cfg.lr, cfg.n_prompts, cfg.algo.beta) == (1e-5, 16, 0.04), err
    assert "the lab's for the options left out (--algo grpo" in out
    code, cfg, out, err = cli_cfg("--lr", "1e-5")                                                # rl_notes' spelling: the lab's
    assert code == 0 and (cfg.n_prompts, cfg.max_new_tokens) == (16, 16) and "rl_notes' spelling" in out, err
    code, cfg, out, err = cli_cfg("--learning-rate", "1e-5", "--n-prompts", 4)                  # a written n_prompts wins over the arithmetic
    assert code == 0 and (cfg.n_prompts, cfg.lr_scheduler_type) == (4, "linear"), err


def _grpo_dump(path, **kw):
    "A real GRPOConfig (CPU), dumped as TRL's to_dict() writes it, to JSON or YAML by the suffix of `path`."
    import yaml
    trl = pytest.importorskip("trl")
    d = json.loads(json.dumps(trl.GRPOConfig(use_cpu=True, bf16=False, **kw).to_dict(), default=str))
    path.write_text(json.dumps(d) if path.suffix == ".json" else yaml.safe_dump(d))
    return path

@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_grpoconfig_dump_runs_unchanged(micro_sft, tmp_path, capsys, suffix):
    "GRPOConfig(...).to_dict() as TRL writes it, defaults and a realistic recipe, runs one step with --config; options after it win."
    from rl_notes.cli import main
    small = ["--max-completion-length", "8", "--max-steps", "1", "--n-eval", "0", "--n-train", "200", "--quiet", "--threads", "1", "--task-arg", "max_digits=2",
             "--task-arg", "scratchpad=false"]
    recipe = dict(learning_rate=3e-6, num_generations=4, per_device_train_batch_size=4, gradient_accumulation_steps=2, beta=0.04,
                  loss_type="dr_grpo", epsilon=0.2, epsilon_high=0.28, scale_rewards="none", mask_truncated_completions=True, warmup_steps=1,
                  lr_scheduler_type="cosine", logging_steps=1, save_steps=100, seed=7, temperature=0.9, max_grad_norm=0.5)
    for name, kw in (("default", {}), ("recipe", recipe)):
        f = _grpo_dump(tmp_path / f"{name}{suffix}", output_dir=str(tmp_path / name), **kw)
        code = main(["train", "--model", micro_sft, "--config", str(f), *small])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert "GRPOConfig's for the options left out" in out and "refused" not in err
        ignored = [l for l in out.splitlines() if "ignored" in l]          # what has no meaning here, set to a non-default value: one line
        assert (len(ignored), "--logging-steps 1" in "".join(ignored)) == ((0, False) if name == "default" else (1, True)), ignored
        cfg = json.loads((tmp_path / name / "config.json").read_text())
        assert cfg["max_new_tokens"] == 8 and cfg["steps"] == 1
    assert (cfg["lr"], cfg["group_size"], cfg["n_prompts"], cfg["seed"], cfg["lr_scheduler_type"]) == (3e-6, 4, 2, 7, "cosine")
    assert (cfg["algo"]["beta"], cfg["algo"]["eps_high"], cfg["algo"]["adv"], cfg["algo"]["overlong_filter"]) == (0.04, 0.28, "group-mean-only", True)

def test_trl_cli_yaml_keys(micro_sft, tmp_path, capsys):
    "TRL's command-line YAML (model_name_or_path, dataset_name, use_peft) runs; a second --config, a nested one and a duplicated key are refused."
    import yaml
    from rl_notes.cli import main
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+{i}="}) + "\n" for i in range(20)))
    (tmp_path / "r.py").write_text("def digits(completions, **kw): return [sum(c.isdigit() for c in x) / 4 for x in completions]\n")
    (tmp_path / "cli.yaml").write_text(yaml.safe_dump(dict(model_name_or_path=micro_sft, dataset_name=str(tmp_path / "p.jsonl"), use_peft=False,
                                                            lora_r=16, torch_dtype="auto", learning_rate=1e-5, num_generations=4,
                                                            per_device_train_batch_size=8, max_completion_length=4, max_steps=1,
                                                            output_dir=str(tmp_path / "run"))))
    code = main(["train", "--config", str(tmp_path / "cli.yaml"), "--reward", f"{tmp_path / 'r.py'}:digits", "--n-eval", "0", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (cfg["model"], cfg["n_prompts"], cfg["lora_r"]) == (micro_sft, 2, 0) and cfg["dataset"].endswith("p.jsonl")
    (tmp_path / "dup.yaml").write_text("learning_rate: 1e-5\nlearning_rate: 1e-6\n")
    (tmp_path / "nest.yaml").write_text(f"config: {tmp_path / 'cli.yaml'}\n")
    for args, says in ((["--config", str(tmp_path / "dup.yaml")], "written twice"), (["--config", str(tmp_path / "nest.yaml")], "do not nest"),
                       (["--config", str(tmp_path / "cli.yaml"), "--config", str(tmp_path / "cli.yaml")], "more than once")):
        assert main(["train", "--model", micro_sft, *args]) == 2
        assert says in capsys.readouterr().err


def test_top_p_trains(micro_sft, tmp_path, capsys):
    "--top-p 0.9 (TRL's option, GRPOConfig's spelling) trains: sampled on the nucleus, the ratio renormalised on it."
    from rl_notes.cli import main
    code = main(["train", "--model", micro_sft, "--top-p", "0.9", "--top-k", "8", "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false",
                 "--n-prompts", "2", "--group-size", "4", "--max-new-tokens", "4", "--n-eval", "0", "--n-train", "100", "--steps", "2", "--quiet",
                 "--out", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert code == 0, err
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (cfg["top_p"], cfg["top_k"], cfg["min_p"]) == (0.9, 8, 0.0)
    rows = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(abs(r["ratio_mean"] - 1) < 1e-5 for r in rows if "ratio_mean" in r)


def test_eval_budget_and_trl_name(micro_sft, capsys):
    "eval refuses a budget past the model's positions in one line (no hang), and takes TRL's --max-completion-length."
    from rl_notes.cli import main
    assert main(["eval", micro_sft, "--max-new-tokens", "10000000"]) == 2
    assert "leaves no room for a prompt" in capsys.readouterr().err
    assert main(["eval", micro_sft, "--max-completion-length", "4", "--n", "4", "--task-arg", "max_digits=2", "--task-arg", "scratchpad=false"]) == 0
    capsys.readouterr()


def test_reward_without_dataset_is_refused(cli_cfg, tmp_path):
    "A forgotten --dataset would train on the built-in prompts: one line; --task addition says it is meant."
    (tmp_path / "r.py").write_text("def f(completions, **kw): return [0.0] * len(completions)\n")
    code, cfg, out, err = cli_cfg("--reward", f"{tmp_path / 'r.py'}:f")
    assert code == 2 and "--reward without --dataset" in err and cfg is None
    code, cfg, out, err = cli_cfg("--reward", f"{tmp_path / 'r.py'}:f", "--task", "addition")
    assert code == 0 and cfg.task == "addition", err


def test_optim_adamw_torch_is_what_runs(cli_cfg):
    for v in ("adamw_torch", "adamw_torch_fused"):
        code, cfg, out, err = cli_cfg("--optim", v)
        assert code == 0 and "--optim" not in out, err
    code, cfg, out, err = cli_cfg("--optim", "adafactor")
    assert code == 2 and "AdamW" in err


def test_lora_options_that_do_nothing_and_a_run_as_model_are_refused(cli_cfg, micro_sft, tmp_path, capsys):
    code, cfg, out, err = cli_cfg("--save-adapter")
    assert code == 2 and "lora_r is 0" in err
    code, cfg, out, err = cli_cfg("--lora-r", "4", "--lora-target-modules", "embed_tokens")
    assert code == 2 and "embed_tokens" in err
    from rl_notes.cli import main
    run = tmp_path / "run"; run.mkdir(); (run / "metrics.jsonl").write_text(""); (run / "config.json").write_text("{}")   # a run's own config.json
    assert main(["train", "--model", str(run), "--task", "addition"]) == 2
    assert "is a run directory, not a model: pass its model/" in capsys.readouterr().err


def test_demo_out_never_replaces_a_users_files(tmp_path, capsys):
    "demo --out DIR: a user's summary.md is not replaced, a link at curves.png is not written through (one line, nothing changed)."
    from rl_notes.cli import main
    (tmp_path / "d").mkdir(); (tmp_path / "d" / "summary.md").write_text("my notes")
    assert main(["demo", "--quick", "--out", str(tmp_path / "d")]) == 2
    assert "which a previous demo did not write" in capsys.readouterr().err and (tmp_path / "d" / "summary.md").read_text() == "my notes"
    (tmp_path / "e").mkdir(); (tmp_path / "target.png").write_bytes(b"mine"); (tmp_path / "e" / "curves.png").symlink_to(tmp_path / "target.png")
    assert main(["demo", "--quick", "--out", str(tmp_path / "e"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "target.png").read_bytes() == b"mine" and not (tmp_path / "e" / "curves.png").is_symlink()
    assert "accuracies of 0 are expected" in out


def test_plot_reads_what_the_doctor_reads(tmp_path, capsys):
    "rl_notes plot takes a TRL output folder (trainer_state.json) as the doctor does, beside an rl_notes run."
    from rl_notes.cli import main
    trl_run = Path(__file__).resolve().parents[1] / "nbs" / "examples" / "doctor_validation_v3" / "ctrl-trl-s3"
    assert main(["plot", str(trl_run), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
