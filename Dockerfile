# An image with cleanrl, its locked dependencies and, by default, every extra that runs on Linux x86-64:
#   docker build -t cleanrl .
#   docker build -t cleanrl-lean --build-arg EXTRAS="" .        # the core only (classic control)
#   docker run --rm -v "$PWD/runs:/cleanrl/runs" -v "$PWD/videos:/cleanrl/videos" cleanrl \
#       python cleanrl/ppo.py --env-id CartPole-v1 --capture-video
# With the NVIDIA Container Toolkit on the host, `docker run --gpus all ...` runs the torch scripts on CUDA (the
# locked torch build supports it). The JAX scripts run on the CPU: the `jax` extra is JAX's CPU build.
FROM python:3.11-slim

# MuJoCo renders videos off-screen through EGL, with Mesa's software renderer when there is no GPU
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends libegl1 libgl1 libgl1-mesa-dri \
    && rm -rf /var/lib/apt/lists/*

# every extra that installs on Linux x86-64 together (procgen needs numpy < 2 and cannot share the environment)
ARG EXTRAS="atari mujoco dm_control jax envpool pettingzoo optuna cloud"
ENV UV_LINK_MODE=copy \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MUJOCO_GL=egl
RUN pip install --no-cache-dir uv

WORKDIR /cleanrl
# dependencies first, in their own layer: it is rebuilt only when the lock changes, not when a script does
COPY pyproject.toml uv.lock README.md ./
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-project --compile-bytecode $(for e in $EXTRAS; do printf -- "--extra %s " "$e"; done)

COPY cleanrl_utils ./cleanrl_utils
COPY cleanrl ./cleanrl
COPY benchmark ./benchmark
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --compile-bytecode $(for e in $EXTRAS; do printf -- "--extra %s " "$e"; done)

CMD ["python", "cleanrl/ppo.py"]
