# An image with cleanrl and its locked dependencies:
#   docker build -t cleanrl .
#   docker run --rm -v "$PWD/runs:/cleanrl/runs" cleanrl python cleanrl/ppo.py --env-id CartPole-v1
# (add --gpus all to use CUDA; the locked torch build supports it)
FROM python:3.11-slim

ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1
RUN pip install --no-cache-dir uv

WORKDIR /cleanrl
# dependencies first, in their own layer: it is rebuilt only when the lock changes, not when a script does
COPY pyproject.toml uv.lock README.md ./
RUN --mount=type=cache,target=/root/.cache/uv uv sync --frozen --no-dev --no-install-project

COPY cleanrl_utils ./cleanrl_utils
COPY cleanrl ./cleanrl
RUN --mount=type=cache,target=/root/.cache/uv uv sync --frozen --no-dev

CMD ["python", "cleanrl/ppo.py"]
