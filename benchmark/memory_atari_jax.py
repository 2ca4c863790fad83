"""Peak memory of dqn_atari_jax.py / c51_atari_jax.py at their defaults: the replay buffer built as the script builds it
(1,000,000 frames) and filled with synthetic frames until every page is touched, the flax Q-network and its target, Adam,
and jitted gradient steps on batches sampled from it, as the script makes them (the update is copied from the script).

    uv run python benchmark/memory_atari_jax.py --script dqn_atari_jax
    uv run python benchmark/memory_atari_jax.py --script c51_atari_jax
"""

import argparse
import importlib.util
import pathlib
import resource
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax

parser = argparse.ArgumentParser()
parser.add_argument("--script", choices=["dqn_atari_jax", "c51_atari_jax"], default="dqn_atari_jax")
parser.add_argument("--buffer-size", type=int, default=1_000_000)
parser.add_argument("--episode-length", type=int, default=1000, help="agent steps per synthetic episode")
parser.add_argument("--updates", type=int, default=20)
args = parser.parse_args()

path = pathlib.Path(__file__).resolve().parents[1] / "cleanrl" / f"{args.script}.py"
spec = importlib.util.spec_from_file_location(args.script, path)
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)
defaults = script.Args()


def peak_rss_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


before = peak_rss_gib()
space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
rb = script.FrameReplayBuffer(args.buffer_size, 1, space)
stacks = np.random.default_rng(0).integers(0, 256, size=(64, 4, 84, 84), dtype=np.uint8)
action, reward, not_truncated = np.zeros(1, np.int64), np.zeros(1, np.float32), np.array([False])
start = time.time()
for step in range(args.buffer_size + 100):  # past the capacity: the ring has wrapped, every slot written
    ended = np.array([step % args.episode_length == args.episode_length - 1])
    rb.add(stacks[step % 64][None], stacks[(step + 1) % 64][None], action, reward, ended, not_truncated)
filled = time.time() - start
after_fill = peak_rss_gib()

n_actions = 4  # Breakout
if args.script == "dqn_atari_jax":
    q_network = script.QNetwork(action_dim=n_actions)
    tx = optax.adam(learning_rate=defaults.learning_rate)
else:
    q_network = script.QNetwork(action_dim=n_actions, n_atoms=defaults.n_atoms)
    atoms = jnp.linspace(defaults.v_min, defaults.v_max, num=defaults.n_atoms)
    tx = optax.adam(learning_rate=defaults.learning_rate, eps=0.01 / defaults.batch_size)
params = q_network.init(jax.random.PRNGKey(1), space.sample()[None])
q_state = script.TrainState.create(apply_fn=q_network.apply, params=params, target_params=params, tx=tx)


@jax.jit
def update(q_state, obs, actions, next_obs, rewards, terminations):
    if args.script == "dqn_atari_jax":
        target = script.td_target(rewards, q_network.apply(q_state.target_params, next_obs), terminations, defaults.gamma)

        def loss_fn(params):
            q_pred = q_network.apply(params, obs)[jnp.arange(len(obs)), actions]
            return ((q_pred - target) ** 2).mean(), q_pred
    else:
        next_pmfs = jax.nn.softmax(q_network.apply(q_state.target_params, next_obs), axis=-1)
        next_actions = (next_pmfs * atoms).sum(axis=-1).argmax(axis=-1)
        next_pmfs = next_pmfs[jnp.arange(len(next_obs)), next_actions]
        target_pmfs = script.project_distribution(next_pmfs, rewards, terminations, defaults.gamma, atoms)

        def loss_fn(params):
            log_pmfs = jax.nn.log_softmax(q_network.apply(params, obs), axis=-1)[jnp.arange(len(obs)), actions]
            return -(target_pmfs * log_pmfs).sum(axis=-1).mean(), (jnp.exp(log_pmfs) * atoms).sum(axis=-1)

    (loss_value, q_pred), grads = jax.value_and_grad(loss_fn, has_aux=True)(q_state.params)
    return loss_value, q_pred, q_state.apply_gradients(grads=grads)


q_values_fn = jax.jit(q_network.apply)
for _ in range(args.updates):
    batch = [tensor.numpy() for tensor in rb.sample(defaults.batch_size, "cpu")]
    loss, q_pred, q_state = update(q_state, *batch)
    q_values_fn(q_state.params, batch[0][:1]).block_until_ready()
jax.block_until_ready(q_state)
peak = peak_rss_gib()
arrays = sum(value.nbytes for value in vars(rb).values() if isinstance(value, np.ndarray)) / 1e9
print(
    f"{args.script} at its defaults (FrameReplayBuffer of {args.buffer_size:,} frames, arrays {arrays:.2f} GB; "
    f"{args.updates} jitted updates of batch {defaults.batch_size} on {jax.devices()[0].platform}): peak RSS "
    f"{peak * 2**30 / 1e9:.2f} GB ({peak:.2f} GiB); {before * 2**30 / 1e9:.2f} GB before the buffer, "
    f"{after_fill * 2**30 / 1e9:.2f} GB once filled (in {filled:.0f} s)"
)
