"rl_notes.control: GymPPOConfig validation, and the split-up train_ppo_gym against the single-function loop it replaced (identical histories)."
import math, re
import pytest
import torch
import torch.nn as nn
from rl_notes.control import GymPPOConfig, train_ppo_gym, ActorCritic
from rl_notes.configs import ConfigError
from rl_notes.ppo import gae_episodes, ppo_policy_loss, value_loss, explained_variance

torch.set_num_threads(1)
gym = pytest.importorskip("gymnasium")


@pytest.mark.parametrize("kw,msg", [
    (dict(n_envs=0), "GymPPOConfig.n_envs must be an int >= 1, got 0"),
    (dict(n_steps=True), "GymPPOConfig.n_steps must be an int >= 1, got True"),
    (dict(lr=math.inf), "GymPPOConfig.lr must be a finite float > 0, got inf"),
    (dict(lam=-0.1), "GymPPOConfig.lam must be a finite float >= 0 and <= 1, got -0.1"),
    (dict(eps=1.0), "GymPPOConfig.eps must be a finite float > 0 and < 1, got 1.0"),
    (dict(vclip=-1.0), "GymPPOConfig.vclip must be a finite float > 0 or None, got -1.0"),
    (dict(norm_adv="maybe"), "GymPPOConfig.norm_adv must be a bool, got 'maybe'"),
    (dict(env_id=None), "GymPPOConfig.env_id must be a str, got None"),
    (dict(total_steps=10), "GymPPOConfig.total_steps must be >= n_envs * n_steps"),
])
def test_gym_config_errors(kw, msg):
    with pytest.raises(ConfigError, match=re.escape(msg)): GymPPOConfig(**kw)


def _reference(cfg, log_every=0):
    "train_ppo_gym as one function, before it was split into _make_envs / _rollout / _gae_batch / _ppo_epochs."
    import numpy as np
    torch.manual_seed(cfg.seed)
    envs = [gym.make(cfg.env_id) for _ in range(cfg.n_envs)]
    cont = isinstance(envs[0].action_space, gym.spaces.Box)
    obs_dim = envs[0].observation_space.shape[0]
    act_dim = envs[0].action_space.shape[0] if cont else envs[0].action_space.n
    ac = ActorCritic(obs_dim, act_dim, continuous=cont, hidden=cfg.hidden)
    opt = torch.optim.Adam(ac.parameters(), lr=cfg.lr, eps=1e-5)
    obs = np.stack([e.reset(seed=cfg.seed + i)[0] for i, e in enumerate(envs)]).astype(np.float32)
    N, T = cfg.n_envs, cfg.n_steps
    ep_ret = [0.0] * N
    hist = dict(step=[], ret100=[], ev=[], approx_kl=[], clipfrac=[], entropy=[], episodes=[])
    n_updates, step = cfg.total_steps // (N * T), 0
    for upd in range(n_updates):
        if cfg.anneal_lr: opt.param_groups[0]["lr"] = cfg.lr * (1 - upd / n_updates)
        O, O2 = np.zeros((T, N, obs_dim), np.float32), np.zeros((T, N, obs_dim), np.float32)
        R, TERM, END = np.zeros((T, N), np.float32), np.zeros((T, N), bool), np.zeros((T, N), bool)
        B_act, B_logp = [], []
        for t in range(T):
            with torch.no_grad():
                d = ac.dist(torch.from_numpy(obs)); a = d.sample(); B_logp.append(d.log_prob(a))
            B_act.append(a); O[t] = obs
            a_env = (a.clamp(-1, 1).numpy() * envs[0].action_space.high) if cont else a.numpy()
            for i, e in enumerate(envs):
                o, r, term, trunc, _ = e.step(a_env[i] if cont else int(a_env[i]))
                ep_ret[i] += r
                R[t, i], TERM[t, i], END[t, i] = r, term, term or trunc
                O2[t, i] = o
                if term or trunc:
                    hist["episodes"].append(ep_ret[i]); ep_ret[i] = 0.0
                    o, _ = e.reset()
                obs[i] = o
        step += N * T
        O, O2, A, LP = torch.from_numpy(O), torch.from_numpy(O2), torch.stack(B_act), torch.stack(B_logp)
        R, TERM, END = torch.from_numpy(R) * cfg.reward_scale, torch.from_numpy(TERM), torch.from_numpy(END)
        with torch.no_grad():
            V, V2 = ac.value(O), ac.value(O2)
            adv, ret = gae_episodes(R.T, V.T, V2.T, TERM.T, END.T, cfg.gamma, cfg.lam)
        flat = lambda x: x.transpose(0, 1).reshape(N * T, *x.shape[2:])
        O, A, LP, V, adv, ret = flat(O), flat(A), flat(LP), flat(V), adv.reshape(-1), ret.reshape(-1)
        for _ in range(cfg.epochs):
            perm = torch.randperm(N * T)
            for s in range(0, N * T, cfg.minibatch):
                j = perm[s:s + cfg.minibatch]
                d = ac.dist(O[j])
                a_j = adv[j]
                if cfg.norm_adv: a_j = (a_j - a_j.mean()) / (a_j.std() + 1e-8)
                one = torch.ones(1, len(j), dtype=torch.bool)
                pg, pm = ppo_policy_loss(d.log_prob(A[j])[None], LP[j][None], a_j[None], one, cfg.eps, cfg.eps)
                vl, vm = value_loss(ac.value(O[j])[None], V[j][None], ret[j][None], one, clip=cfg.vclip)
                ent = d.entropy().mean()
                loss = pg - cfg.ent_coef * ent + cfg.vf_coef * vl
                opt.zero_grad(); loss.backward()
                nn.utils.clip_grad_norm_(ac.parameters(), cfg.max_grad_norm); opt.step()
        ev = float(explained_variance(V[None], ret[None], torch.ones(1, N * T, dtype=torch.bool)))
        r100 = sum(hist["episodes"][-100:]) / max(1, len(hist["episodes"][-100:]))
        for k, x in (("step", step), ("ret100", r100), ("ev", ev), ("approx_kl", float(pm["approx_kl"])),
                     ("clipfrac", float(pm["clipfrac"])), ("entropy", float(ent.detach()))): hist[k].append(x)
        if cfg.solved is not None and len(hist["episodes"]) >= 100 and r100 >= cfg.solved: break
    hist["model"] = ac
    return hist


@pytest.mark.parametrize("cfg", [
    GymPPOConfig(n_envs=3, n_steps=40, total_steps=480, minibatch=48, epochs=2, hidden=16, lr=1e-3, ent_coef=0.01, seed=3),
    GymPPOConfig(env_id="Pendulum-v1", n_envs=2, n_steps=64, total_steps=256, minibatch=32, epochs=2, hidden=16, vclip=None,
                 reward_scale=0.1, anneal_lr=False, seed=1),
], ids=["CartPole", "Pendulum"])
def test_split_loop_equals_reference(cfg):
    new, ref = train_ppo_gym(cfg, log_every=0), _reference(cfg)
    for k in ("step", "ret100", "ev", "approx_kl", "clipfrac", "entropy", "episodes"): assert new[k] == ref[k], k
    for a, b in zip(new["model"].parameters(), ref["model"].parameters()): assert torch.equal(a, b)


def test_solved_stops_early(capsys):
    h = train_ppo_gym(GymPPOConfig(n_envs=8, n_steps=32, total_steps=256 * 20, minibatch=256, epochs=1, hidden=8, solved=-1.0), log_every=1)
    assert len(h["step"]) < 20 and len(h["episodes"]) >= 100       # any return beats -1: it stops at the first update with 100 episodes
    assert "solved at update" in capsys.readouterr().out
