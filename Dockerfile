# An image for GPU hosts: the tuner installed, `tuner` as the entrypoint.
#   docker build -t tuner .
#   docker run --gpus all -v "$PWD:/work" -w /work tuner run studies/patch_embed_sm90a.toml
# The CUDA driver comes from the host (--gpus); NVRTC comes from pip (nvidia-cuda-nvrtc).
FROM nvidia/cuda:13.0.1-base-ubuntu24.04

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PATH=/opt/venv/bin:$PATH

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

WORKDIR /opt/tuner
COPY pyproject.toml README.md ./
COPY tuner ./tuner
COPY dashboards ./dashboards
COPY kernel ./kernel
COPY studies ./studies
# The project itself, with its pinned ranges from pyproject.toml.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[postgres,dashboard]"

WORKDIR /work
ENTRYPOINT ["tuner"]
CMD ["--help"]
