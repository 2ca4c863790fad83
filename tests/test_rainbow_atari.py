"""cleanrl/rainbow_atari.py: its prioritized n-step replay buffer on cleanrl_utils.buffers' frame-once storage (sampling
in proportion to priority, importance weights, sum tree; n-step returns on hand-made trajectories and on a real ALE
game), the noisy layers and the dueling distributional head, and the script as a user runs it (smoke with every flag,
resume, bad inputs; its SIGTERM test is test_value_based_atari.py's)."""

import ast
import inspect

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import (
    assert_clean_failure,
    check_bad_input_in_process,
    check_enjoy_replays_the_evaluation,
    check_evaluations,
    check_killed_run_resumes_to_the_same_weights,
    checkpoint_files,
    load_checkpoint,
    load_script,
    run_script,
    run_with_every_flag,
    scalar_tags,
    scalars,
)

SCRIPT = "rainbow_atari.py"
SMALL = ["--buffer-size", "1000", "--batch-size", "32"]
TINY_FRAMES = gym.spaces.Box(0, 255, (4, 2, 2), np.uint8)  # 2x2 "frames": the buffer works for any frame shape


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def rainbow():
    return load_script("rainbow_atari")


def stack(frames, t):
    """The observation at step t of an episode whose frames are `frames`: frames t-3..t, the first one repeated before
    the episode starts (as FrameStackObservation pads)."""
    return np.stack([frames[max(k, 0)] for k in range(t - 3, t + 1)])


def add_step(rb, obs, next_obs, action, reward, terminated=False, truncated=False):
    """One step of one env, as the vector env returns it."""
    rb.add(obs[None], next_obs[None], np.array([action]), np.array([reward], np.float32), [terminated], [truncated])


def add_episode(rb, first_value, rewards, terminated=False, truncated=False):
    """Add one episode of len(rewards) steps whose frame k is filled with first_value + k and whose action at step t
    is t; its last step terminates or truncates as asked (neither: the episode stays open). Returns its frames."""
    frames = [np.full((2, 2), first_value + k, dtype=np.uint8) for k in range(len(rewards) + 1)]
    for t, reward in enumerate(rewards):
        last = t == len(rewards) - 1
        add_step(rb, stack(frames, t), stack(frames, t + 1), t, reward, terminated and last, truncated and last)
    return frames


def all_valid(rb):
    """Every transition the buffer can return, as (envs, slots), oldest first in each env."""
    envs, slots = np.indices(rb.positions.shape).reshape(2, -1)
    valid = rb.n_step_transitions(envs, slots)[0]
    envs, slots = envs[valid], slots[valid]
    order = np.lexsort((rb.positions[envs, slots], envs))
    return envs[order], slots[order]


def test_n_step_transitions_of_hand_made_episodes(rainbow):
    """n = 3, gamma = 0.5, three episodes: one that terminates, one that is truncated, one still open. Each transition
    is (obs, action, n-step return, next obs after n steps or at the episode's end, discount gamma**k or 0 after a
    termination), never crossing an episode boundary; the open episode's last two steps are not transitions yet."""
    rb = rainbow.PrioritizedFrameReplayBuffer(100, 1, TINY_FRAMES, n_step=3, gamma=0.5, alpha=0.5)
    a = add_episode(rb, 10, [1, 0, 2, 1, 1], terminated=True)
    b = add_episode(rb, 30, [1, 1, 1, 1], truncated=True)
    c = add_episode(rb, 50, [1, 1, 1])
    # (episode frames, step, n-step return, next obs step, discount), by hand
    expected = [
        (a, 0, 1 + 0.5 * 0 + 0.25 * 2, 3, 0.125),
        (a, 1, 0 + 0.5 * 2 + 0.25 * 1, 4, 0.125),
        (a, 2, 2 + 0.5 * 1 + 0.25 * 1, 5, 0.0),  # the termination comes at the third step
        (a, 3, 1 + 0.5 * 1, 5, 0.0),
        (a, 4, 1, 5, 0.0),
        (b, 0, 1 + 0.5 + 0.25, 3, 0.125),
        (b, 1, 1 + 0.5 + 0.25, 4, 0.125),
        (b, 2, 1 + 0.5, 4, 0.25),  # truncated after 2 steps: bootstraps from the real last observation
        (b, 3, 1, 4, 0.5),
        (c, 0, 1 + 0.5 + 0.25, 3, 0.125),  # steps 1 and 2 of the open episode wait for their third step
    ]
    obs, actions, next_obs, returns, discounts = rb.get(*all_valid(rb))
    assert len(obs) == len(expected)
    for k, (frames, t, ret, next_t, discount) in enumerate(expected):
        np.testing.assert_array_equal(obs[k], stack(frames, t))
        np.testing.assert_array_equal(next_obs[k], stack(frames, next_t))
        assert actions[k] == t and returns[k] == pytest.approx(ret) and discounts[k] == pytest.approx(discount), k
    # the open episode's next step completes its second transition: R = 1 + 0.5 + 0.25 * 3, next obs after step 3
    add_step(rb, stack(c, 3), stack(c + [np.full((2, 2), 54, np.uint8)], 4), 3, 3.0)
    obs, _, next_obs, returns, discounts = rb.get(*all_valid(rb))
    assert len(obs) == len(expected) + 1 and returns[-1] == pytest.approx(2.25) and discounts[-1] == pytest.approx(0.125)
    np.testing.assert_array_equal(obs[-1], stack(c, 1))
    assert next_obs[-1][-1, 0, 0] == 54
    # n = 1 is the one-step transition: the stored reward, the next observation, discount gamma or 0
    rb1 = rainbow.PrioritizedFrameReplayBuffer(100, 1, TINY_FRAMES, n_step=1, gamma=0.5, alpha=0.5)
    frames = add_episode(rb1, 10, [1, 0, 2], terminated=True)
    obs, _, next_obs, returns, discounts = rb1.get(*all_valid(rb1))
    np.testing.assert_array_equal(returns, [1, 0, 2])
    np.testing.assert_array_equal(discounts, [0.5, 0.5, 0.0])
    np.testing.assert_array_equal(next_obs, np.stack([stack(frames, t) for t in (1, 2, 3)]))
    # an episode cut short (a resumed run whose games could not be saved starts new ones: rb.cut_episodes()) ends
    # where it was cut: its last transitions bootstrap from its last observation, never from the next episode's steps
    rb_cut = rainbow.PrioritizedFrameReplayBuffer(100, 1, TINY_FRAMES, n_step=3, gamma=0.5, alpha=0.5)
    cut = add_episode(rb_cut, 10, [1, 1, 1, 1])
    rb_cut.cut_episodes()
    add_episode(rb_cut, 30, [2, 2, 2], terminated=True)
    obs, _, next_obs, returns, discounts = rb_cut.get(*all_valid(rb_cut))
    assert len(obs) == 4 + 3
    np.testing.assert_allclose(returns[:4], [1.75, 1.75, 1.5, 1.0])
    np.testing.assert_allclose(discounts[:4], [0.125, 0.125, 0.25, 0.5])
    np.testing.assert_array_equal(next_obs[:4], np.stack([stack(cut, t) for t in (3, 4, 4, 4)]))


def test_prioritized_sampling_importance_weights_and_sum_tree(rainbow):
    """Known priorities: samples come in proportion to priority**alpha (chi-square), the importance weights are
    (N * P(i))**-beta over the batch's largest, and the sum tree's totals follow every update, by hand."""
    alpha, beta = 0.5, 0.4
    rb = rainbow.PrioritizedFrameReplayBuffer(16, 1, TINY_FRAMES, n_step=1, gamma=0.99, alpha=alpha)
    add_episode(rb, 10, [0] * 8, terminated=True)  # 9 frames: the first only starts the episode, 8 transitions
    _, slots = all_valid(rb)  # all in env 0
    assert len(slots) == 8
    leaves = rb.tree.leaves + slots
    # a new transition gets the highest priority seen so far (1 at first); the episode's first frames get none
    np.testing.assert_array_equal(rb.tree.nodes[leaves], np.ones(8))
    assert rb.tree.nodes[1] == 8.0

    priorities = np.array([1.0, 4.0, 9.0, 16.0, 0.25, 2.25, 6.25, 0.01])
    rb.update_priorities(slots, priorities)  # one env: a transition's index in the sum tree is its slot
    expected_p = priorities**alpha / (priorities**alpha).sum()  # 1, 2, 3, 4, 0.5, 1.5, 2.5, 0.1 over 14.6
    assert rb.tree.nodes[1] == pytest.approx(14.6)
    assert rb.tree.nodes[leaves].sum() == pytest.approx(14.6) and rb.max_priority == 16.0
    # every inner node is the sum of its children (16 leaves: the root's left child holds slots 0-7)
    inner = np.arange(1, rb.tree.leaves)
    np.testing.assert_allclose(rb.tree.nodes[inner], rb.tree.nodes[2 * inner] + rb.tree.nodes[2 * inner + 1])
    assert rb.tree.nodes[2] == pytest.approx(np.sum(np.sqrt(priorities[slots < 8])))
    rb.update_priorities(slots[:1], np.array([25.0]))  # 1 -> 25: the total grows by 5 - 1
    assert rb.tree.nodes[1] == pytest.approx(18.6) and rb.max_priority == 25.0
    rb.update_priorities(slots[:1], np.array([1.0]))
    assert rb.tree.nodes[1] == pytest.approx(14.6)

    np.random.seed(0)
    counts, draws = np.zeros(len(rb.positions[0]), dtype=np.int64), 0
    for _ in range(40):
        *batch, b_slots = rb.sample(500, beta, "cpu")  # the batch's sum-tree indices, with one env its slots
        np.add.at(counts, b_slots, 1)
        draws += len(b_slots)
        # importance weights by hand for these draws: N = 8 transitions
        w = (8 * expected_p[np.searchsorted(slots, b_slots)]) ** -beta
        np.testing.assert_allclose(batch[-1].numpy(), w / w.max(), rtol=1e-5)
    observed, expected_counts = counts[slots], expected_p * draws
    assert counts.sum() == draws == 20_000 and observed.sum() == draws  # nothing drawn outside the transitions
    chi_square = ((observed - expected_counts) ** 2 / expected_counts).sum()
    assert chi_square < 24.3, (observed, expected_counts)  # the 0.999 quantile with 7 degrees of freedom

    # a new transition enters at the highest priority seen (25, then 1 again): 25**alpha = 5
    frames = [np.zeros((2, 2), np.uint8), np.ones((2, 2), np.uint8)]
    add_step(rb, stack(frames, 0), stack(frames, 1), 0, 0.0)
    new_slot = rb.positions[0].argmax()
    assert rb.tree.nodes[rb.tree.leaves + new_slot] == pytest.approx(np.sqrt(25.0))


def test_sum_tree_by_hand():
    """cleanrl_utils.buffers.SumTree, which the prioritized replay samples with: 5 weights in 8 leaves, every inner
    node the sum of its children, find by cumulative mass, and draws in proportion among the indices accepted."""
    from cleanrl_utils.buffers import SumTree

    tree = SumTree(5)
    assert tree.leaves == 8 and len(tree.nodes) == 16 and tree.nodes[1] == 0
    tree.set([0, 1, 2, 3, 4], [1.0, 2.0, 0.0, 3.0, 4.0])
    assert (tree.nodes[1], tree.nodes[2], tree.nodes[3], tree.nodes[4]) == (10.0, 6.0, 4.0, 3.0)
    # cumulative masses: [0, 1) is index 0, [1, 3) index 1, [3, 6) index 3 (index 2 weighs nothing), [6, 10) index 4
    np.testing.assert_array_equal(tree.find([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99]), [0, 0, 1, 1, 3, 3, 4, 4])
    tree.set([1, 1], [5.0, 5.0])  # a repeated index: the same value twice
    assert tree.nodes[1] == 13.0 and tree.nodes[2] == 9.0
    inner = np.arange(1, tree.leaves)
    np.testing.assert_array_equal(tree.nodes[inner], tree.nodes[2 * inner] + tree.nodes[2 * inner + 1])

    np.random.seed(0)
    draws = tree.sample(20_000, lambda indices: indices != 4)  # index 4 refused: drawn again
    assert len(draws) == 20_000
    np.testing.assert_allclose(np.bincount(draws, minlength=5) / len(draws), [1 / 9, 5 / 9, 0, 3 / 9, 0], atol=0.01)
    with pytest.raises(RuntimeError, match="no whole transition"):
        tree.sample(4, lambda indices: np.zeros(len(indices), dtype=bool))


def test_buffer_returns_the_n_step_transitions_of_a_real_game(rainbow):
    """Two Breakout envs built with the script's make_env, random actions, through lost lives and whole games, into a
    ring of 100 frames per env that wraps around several times: every transition the buffer can return equals the
    n-step transition computed from what the env emitted (obs, action, clipped rewards, real next obs, terminated)."""
    num_envs, capacity, n, gamma = 2, 100, 3, 0.9
    envs = gym.vector.SyncVectorEnv(
        [rainbow.make_env("BreakoutNoFrameskip-v4", i, False, "test") for i in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    assert envs.single_observation_space.shape == (4, 84, 84) and envs.single_observation_space.dtype == np.uint8
    rb = rainbow.PrioritizedFrameReplayBuffer(num_envs * capacity, num_envs, envs.single_observation_space, n, gamma)
    emitted = [[] for _ in range(num_envs)]  # (obs, action, reward, real next obs, terminated, episode ended)
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=0)
    for _ in range(600):
        actions = rng.integers(envs.single_action_space.n, size=num_envs)
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        real_next_obs = next_obs.copy()
        if "final_obs" in infos:
            real_next_obs[infos["_final_obs"]] = np.stack(infos["final_obs"][infos["_final_obs"]])
        rb.add(obs, real_next_obs, actions, rewards, terminations, truncations)
        for i in range(num_envs):
            ended = terminations[i] or truncations[i]
            emitted[i].append((obs[i], actions[i], rewards[i], real_next_obs[i], terminations[i], ended))
        obs = next_obs
    envs.close()
    assert (rb.counts > 3 * capacity).all(), "the ring should have wrapped around several times"
    assert sum(t[2] for e in emitted for t in e) > 0, "some points scored"

    valid_envs, valid_slots = all_valid(rb)
    for i in range(num_envs):
        e = emitted[i]
        assert sum(t[4] for t in e) >= 5 and {t[2] for t in e} <= {0.0, 1.0}, "lost lives, clipped rewards"
        # n-step transitions from the emitted list: stop after a termination or a truncation
        complete = [j for j in range(len(e)) if j + n <= len(e) or any(t[5] for t in e[j:])]
        mine = valid_envs == i
        b_obs, b_actions, b_next_obs, b_returns, b_discounts = rb.get(valid_envs[mine], valid_slots[mine])
        assert capacity // 2 <= len(b_obs) <= capacity - 1
        for k, j in enumerate(complete[-len(b_obs) :]):
            ret, discount = 0.0, 1.0
            for t in e[j : j + n]:
                ret, discount, next_o = ret + discount * t[2], discount * gamma * (1.0 - float(t[4])), t[3]
                if t[5]:
                    break
            np.testing.assert_array_equal(b_obs[k], e[j][0])
            np.testing.assert_array_equal(b_next_obs[k], next_o)
            assert b_actions[k] == e[j][1] and b_returns[k] == pytest.approx(ret) and b_discounts[k] == pytest.approx(discount)
        assert (b_discounts == 0).sum() >= 2, "the window should hold lost lives"

    # a checkpoint's state_dict restores the same transitions and the same sum tree
    restored = rainbow.PrioritizedFrameReplayBuffer(num_envs * capacity, num_envs, envs.single_observation_space, n, gamma)
    restored.load_state_dict(rb.state_dict())
    np.testing.assert_array_equal(restored.tree.nodes, rb.tree.nodes)
    for a, b in zip(rb.get(valid_envs, valid_slots), restored.get(*all_valid(restored))):
        np.testing.assert_array_equal(a, b)
    # a sampled batch: uint8 frames, float returns, discounts and weights
    np.random.seed(0)
    s_obs, s_actions, s_next_obs, s_returns, s_discounts, s_weights, _ = rb.sample(64, 0.4, "cpu")
    assert s_obs.dtype == s_next_obs.dtype == torch.uint8 and s_obs.shape == (64, 4, 84, 84) and s_actions.dtype == torch.int64
    assert s_returns.dtype == s_discounts.dtype == s_weights.dtype == torch.float32 and s_weights.max() == 1.0


def test_buffer_holds_each_frame_once(rainbow):
    """N transitions take about N frames plus 33 bytes of bookkeeping and at most 32 of sum tree each."""
    n = 10_000
    rb = rainbow.PrioritizedFrameReplayBuffer(n, 1, gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    total = sum(value.nbytes for value in vars(rb).values() if isinstance(value, np.ndarray)) + rb.tree.nodes.nbytes
    assert rb.frames.nbytes == n * 84 * 84 and total <= n * (84 * 84 + 33 + 32) + 1024, total


def test_noisy_linear_is_factorised_and_redrawn_at_each_pass(rainbow):
    torch.manual_seed(0)
    layer = rainbow.NoisyLinear(5, 3)
    torch.testing.assert_close(layer.weight_sigma, torch.full((3, 5), 0.5 / np.sqrt(5)))  # sigma_0 / sqrt(inputs)
    x = torch.randn(2, 5)
    first, second = layer(x), layer(x)
    assert not torch.allclose(first, second), "the noise should change at every forward pass"

    def f(eps):
        return eps.sign() * eps.abs().sqrt()

    weight_epsilon = torch.outer(f(layer.eps_out), f(layer.eps_in))  # the factorised form, from the last draw
    weight = layer.weight_mu + layer.weight_sigma * weight_epsilon
    torch.testing.assert_close(second, x @ weight.T + layer.bias_mu + layer.bias_sigma * f(layer.eps_out))
    layer.eval()  # the mean weights, no noise
    torch.testing.assert_close(layer(x), x @ layer.weight_mu.T + layer.bias_mu)
    torch.testing.assert_close(layer(x), layer(x))


def test_dueling_distributional_head_on_real_frames(rainbow):
    """On Breakout's uint8 observations: a distribution over the 51 atoms of [-10, 10] per action, from value and
    advantage streams combined as value + advantage - mean advantage; greedy on the expected return."""
    envs = gym.vector.SyncVectorEnv([rainbow.make_env("BreakoutNoFrameskip-v4", 0, False, "test")])
    obs, _ = envs.reset(seed=0)
    envs.close()
    obs = torch.as_tensor(obs)
    torch.manual_seed(0)
    q_network = rainbow.QNetwork(envs)
    pmfs = q_network(obs)
    assert pmfs.shape == (1, 4, 51) and torch.allclose(pmfs.sum(dim=2), torch.ones(1, 4))
    torch.testing.assert_close(q_network.atoms, torch.linspace(-10, 10, 51))
    assert not torch.equal(q_network(obs), pmfs), "each pass draws new noise"
    torch.manual_seed(1)
    pmfs = q_network(obs)
    torch.manual_seed(1)
    action, action_pmf = q_network.get_action(obs)  # the same noise: the same distributions
    assert action.item() == (pmfs * q_network.atoms).sum(dim=2).argmax(dim=1).item()
    torch.testing.assert_close(action_pmf, pmfs[0, action])
    q_network.eval()  # deterministic: check the dueling combination from the two streams
    hidden = q_network.network(obs / 255.0)
    value, advantage = q_network.value(hidden).view(1, 1, 51), q_network.advantage(hidden).view(1, 4, 51)
    torch.testing.assert_close(q_network(obs), torch.softmax(value + advantage - advantage.mean(dim=1, keepdim=True), dim=2))
    # the float observations of the evaluator give the same distributions as the uint8 ones of training
    torch.testing.assert_close(q_network(obs.float()), q_network(obs))


def test_projection_is_c51s():
    """The C51 projection is reused unchanged (at each sample's discount), so c51's tests of it cover this one: the
    same code, statement for statement (each script words its docstring and comments for its own readers)."""

    def code(function):
        definition = ast.parse(inspect.getsource(function)).body[0]
        definition.body = definition.body[1:] if ast.get_docstring(definition) else definition.body
        return ast.dump(definition)

    rainbow, c51 = load_script("rainbow_atari"), load_script("c51")
    assert code(rainbow.project_distribution) == code(c51.project_distribution)


@pytest.mark.e2e
def test_smoke_with_every_flag(tmp_path):
    flags = ["--total-timesteps", "600", "--learning-starts", "350", "--buffer-size", "500", "--batch-size", "32"]
    flags += ["--capture-video", "--save-model", "--track", "--checkpoint-interval", "300", "--checkpoint-buffer"]
    flags += ["--eval-interval", "250", "--eval-episodes", "2"]
    run_dir = run_with_every_flag(SCRIPT, flags, tmp_path)
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    rb_state = checkpoint["state"]["rb"]
    assert checkpoint["global_step"] == 600 and rb_state["frames"].shape == (1, 500, 84, 84)
    assert rb_state["tree"].nodes[1] > 0 and rb_state["max_priority"] > 0 and rb_state["episode_starts"].shape == (1, 500)
    assert {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/beta"} <= scalar_tags(run_dir)
    # logged every 100 gradient steps (every 400 env steps), once learning has started
    for tag in ["losses/loss", "losses/q_values", "charts/beta"]:
        assert [step for step, _ in scalars(run_dir, tag)] == [400], tag
    # beta anneals linearly from 0.4 at step 0 to 1 at the end
    assert scalars(run_dir, "charts/beta")[0][1] == pytest.approx(0.4 + 0.6 * 400 / 600)
    # whole games: Breakout's five lives take far more than the ~30 agent steps of one
    assert all(length > 100 for _, length in scalars(run_dir, "charts/episodic_length"))
    check_evaluations(run_dir, 250, 2, 600)
    check_enjoy_replays_the_evaluation(run_dir, tmp_path)


@pytest.mark.e2e
def test_killed_run_resumes_to_the_same_weights_with_the_buffer(tmp_path):
    """With --checkpoint-buffer (frames, priorities and the sum tree) the resumed run has everything the uninterrupted
    one had, the emulators' states and the RNGs of the noise included: identical weights at the end."""
    flags = ["--total-timesteps", "700", "--learning-starts", "200", *SMALL, "--seed", "3", "--torch-deterministic"]
    flags += ["--checkpoint-interval", "300", "--checkpoint-buffer", "--save-model", "--target-network-frequency", "200"]
    run_dir = check_killed_run_resumes_to_the_same_weights(SCRIPT, flags, tmp_path, "losses/q_values")
    checkpoint = load_checkpoint(checkpoint_files(run_dir)[0])
    # the last checkpoint is the finished run's (so it can be extended), not the last interval's (600)
    assert checkpoint["global_step"] == 700 and checkpoint["finished"] and checkpoint["state"]["envs"] is not None
    assert checkpoint["state"]["rb"]["counts"][0] > 700  # a frame per step, plus one per episode start


BAD_INPUTS = [
    (["--env-id", "CartPole-v1"], ["CartPole-v1", "not an ALE Atari game", "use c51.py"]),
    (["--env-id", "NoSuchGameNoFrameskip-v4"], ["--env-id NoSuchGameNoFrameskip-v4"]),
    (["--batch-size", "512", "--buffer-size", "100"], ["--buffer-size 100 must hold --batch-size 512"]),
    (["--n-step", "0"], ["--n-step must be positive, got 0"]),
    (["--prioritized-replay-alpha", "1.5"], ["--prioritized-replay-alpha must be in [0, 1], got 1.5"]),
    (["--prioritized-replay-beta", "-0.1"], ["--prioritized-replay-beta must be in [0, 1], got -0.1"]),
    (["--v-min", "10", "--v-max", "-10"], ["--v-min 10.0 must be below --v-max -10.0"]),
    (["--seed", "4294967296"], ["--seed must be in [0, 2**32)"]),
    (["--learning-starts", "500", "--total-timesteps", "100"], ["--learning-starts 500", "--total-timesteps 100"]),
    (["--resume", "runs/never-ran"], ["--resume runs/never-ran: no such folder"]),
]


@pytest.mark.parametrize("flags, fragments", BAD_INPUTS, ids=[" ".join(case[0]) for case in BAD_INPUTS])
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, flags, fragments):
    check_bad_input_in_process(SCRIPT, flags, fragments, tmp_path, monkeypatch, capsys)


@pytest.mark.e2e
def test_a_bad_input_in_a_new_process_is_one_clear_line(tmp_path):
    """A bad input as a user meets it, in a new process (the cases above run in this one)."""
    flags, fragments = BAD_INPUTS[0]
    assert_clean_failure(run_script(SCRIPT, *flags, cwd=tmp_path), *fragments)
    assert not (tmp_path / "runs").exists(), "a bad input started a run"
