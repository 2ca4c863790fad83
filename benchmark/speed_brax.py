"""Steps per second of ppo_continuous_action_brax_jax.py's environments on the machine it runs on (a CPU, or a GPU with
jax[cuda]): its own make_env and step_envs (the step, the autoreset with fresh keys, the episode statistics) over a
rollout of --num-steps steps, compiled as in the script, with actions drawn uniformly; the policy and the update are
left out. Reports the compile time and the steps per second of the compiled rollout; prints a Markdown table.

    uv run python benchmark/speed_brax.py                                         # inverted_pendulum and hopper, 64 and 512 envs
    uv run python benchmark/speed_brax.py --env-ids ant humanoid --num-envs 4096 8192 --rounds 5
"""

import argparse
import importlib.util
import pathlib
import time

import jax
import jax.numpy as jnp

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("brax_ppo", REPO / "cleanrl" / "ppo_continuous_action_brax_jax.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(script, env_id: str, backend: str, num_envs: int, num_steps: int, rounds: int) -> tuple[float, float]:
    env = script.make_env(env_id, backend)

    @jax.jit
    def rollout(state, episode, key):
        def step_once(carry, _):
            state, episode, key = carry
            key, action_key, reset_key = jax.random.split(key, 3)
            action = jax.random.uniform(action_key, (num_envs, env.action_size), minval=-1, maxval=1)
            state, episode, step = script.step_envs(env, state, action, episode, reset_key, 1000)
            return (state, episode, key), step["rewards"]

        return jax.lax.scan(step_once, (state, episode, key), length=num_steps)

    state = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), num_envs))
    carry = (state, dict(returns=jnp.zeros(num_envs), lengths=jnp.zeros(num_envs, jnp.int32)), jax.random.PRNGKey(1))
    start = time.time()
    carry, rewards = jax.block_until_ready(rollout(*carry))
    compile_time = time.time() - start
    start = time.time()
    for _ in range(rounds):
        carry, rewards = rollout(*carry)
    jax.block_until_ready(rewards)
    return compile_time, rounds * num_steps * num_envs / (time.time() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-ids", nargs="+", default=["inverted_pendulum", "hopper"])
    parser.add_argument("--num-envs", nargs="+", type=int, default=[64, 512])
    parser.add_argument("--backend", default="mjx")
    parser.add_argument("--num-steps", type=int, default=16, help="the steps of one compiled rollout (the script's)")
    parser.add_argument("--rounds", type=int, default=3, help="compiled rollouts timed after the first")
    args = parser.parse_args()
    script = load_script()
    print(f"device: {jax.devices()[0].device_kind}; backend {args.backend}; rollouts of {args.num_steps} steps\n")
    print("| env | envs | compile (s) | env steps/s |\n|-|-|-|-|")
    for env_id in args.env_ids:
        for num_envs in args.num_envs:
            compile_time, sps = measure(script, env_id, args.backend, num_envs, args.num_steps, args.rounds)
            print(f"| {env_id} | {num_envs} | {compile_time:.1f} | {sps:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
