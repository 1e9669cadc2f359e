# edgepipe for headless use on an edge box (docs/docker.md):
#   docker build -t edgepipe .                                      # CPU (onnxruntime)
#   docker build -t edgepipe:nvidia --build-arg FLAVOR=nvidia .     # NVIDIA GPU (onnxruntime-gpu)
#   docker run --rm -v edgepipe-data:/data edgepipe                 # the built-in demo
#   docker run --rm -v edgepipe-data:/data edgepipe run /app/pipelines/face_privacy.py --output pixelated.mp4
# Outputs and the optimized-model cache go to the /data volume (the working folder); the models
# of the shipped pipelines are in the image, so the container needs no network at run time.

# Bases pinned to a Python minor version and a distribution release; pin a digest with
# --build-arg BASE=python:3.11-slim-bookworm@sha256:... (docker buildx imagetools inspect BASE).
ARG BASE=python:3.11-slim-bookworm
# The NVIDIA flavor: CUDA 13 and cuDNN 9, because that is what onnxruntime-gpu 1.31.1's own wheel
# metadata asks for (its extras `cuda` and `cudnn` require nvidia-cuda-runtime~=13.0 and
# nvidia-cudnn-cu13~=9.0: `pip install --dry-run --report - onnxruntime-gpu==1.31.1`; the
# requirements table https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html#requirements
# stops at CUDA 12, see https://github.com/microsoft/onnxruntime/issues/29767). That page also says a
# build for CUDA 12.x works with any 12.x (NVIDIA's minor-version compatibility,
# https://docs.nvidia.com/deploy/cuda-compatibility/): 13.0 is the lowest 13.x, so the host needs
# only CUDA 13.0's driver (580 or newer) and the NVIDIA Container Toolkit (--gpus all).
# The tag: https://hub.docker.com/layers/nvidia/cuda/13.0.3-cudnn-runtime-ubuntu24.04 (NVIDIA's list:
# https://gitlab.com/nvidia/container-images/cuda/blob/master/doc/supported-tags.md; NVIDIA retires
# tags, https://gitlab.com/nvidia/container-images/cuda/-/blob/master/doc/support-policy.md: pin a
# digest, or move to a newer 13.x tag, with --build-arg NVIDIA_BASE=...).
ARG NVIDIA_BASE=nvidia/cuda:13.0.3-cudnn-runtime-ubuntu24.04
# onnxruntime-gpu's own pin, changed together with NVIDIA_BASE's CUDA: PyPI has no onnxruntime-gpu
# for every onnxruntime (none for constraints.txt's 1.32.0: https://pypi.org/project/onnxruntime-gpu/#history).
ARG ONNXRUNTIME_GPU=1.31.1
# cpu or nvidia (scripts/image_requirements.py knows what each installs).
ARG FLAVOR=cpu

FROM ${BASE} AS python-cpu

# Ubuntu 24.04's own Python, 3.12 (main, with security updates; 22.04's is 3.10, older than
# requires-python), in a virtual environment. Every pinned dependency has a manylinux wheel for
# cp312 (or abi3). The venv starts with Ubuntu's own older pip (python3-pip-whl): replaced by a
# pinned one (an old pip builds edgepipe too, through build isolation: checked with 22.0.2 and 24.0).
FROM ${NVIDIA_BASE} AS python-nvidia
ARG PIP_VERSION=26.3
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3.12 python3.12-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3.12 -m venv /opt/venv \
 && /opt/venv/bin/python -m pip install --no-cache-dir "pip==${PIP_VERSION}"
ENV PATH=/opt/venv/bin:$PATH

# The pinned requirements, from the project's list and constraints.txt alone. Copied into the
# image by content: an edit of pyproject.toml that changes no dependency reinstalls nothing.
FROM python-${FLAVOR} AS requirements
ARG FLAVOR
ARG ONNXRUNTIME_GPU
# Extras of the project to install too, comma-separated: --build-arg EXTRAS=mqtt,lm. mqtt by
# default (aiomqtt, pure Python): a camera in a container usually reports to a broker (--mqtt).
ARG EXTRAS=mqtt
WORKDIR /src
COPY pyproject.toml constraints.txt scripts/image_requirements.py ./
RUN python image_requirements.py --flavor "$FLAVOR" --extras "$EXTRAS" \
      --pin "onnxruntime-gpu==$ONNXRUNTIME_GPU" > requirements.txt

FROM python-${FLAVOR}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Distribution packages to add, e.g. the video driver of an Intel GPU for /dev/dri:
# --build-arg APT_PACKAGES=intel-media-va-driver (the image carries no GPU driver of its own).
ARG APT_PACKAGES=
RUN if [ -n "$APT_PACKAGES" ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $APT_PACKAGES \
      && rm -rf /var/lib/apt/lists/*; \
    fi

WORKDIR /app

# Dependencies first, so that a code change does not reinstall them: this layer is rebuilt only
# when a pin or the list of requirements changes.
COPY --from=requirements /src/requirements.txt /src/constraints.txt ./
RUN pip install -c constraints.txt -r requirements.txt

# Then the code, without its dependencies (all installed above).
COPY pyproject.toml README.md ./
COPY edgepipe ./edgepipe
RUN pip install --no-deps . && rm -rf build edgepipe.egg-info
COPY pipelines ./pipelines

# The models of the shipped pipelines, fetched and checksummed at build time into a read-only
# folder that edgepipe searches after its cache ($EDGEPIPE_MODELS_DIR): outside /data, so that a
# volume mounted there does not hide them.
RUN EDGEPIPE_CACHE_DIR=/opt/edgepipe edgepipe models pull centerface && chmod -R a+rX /opt/edgepipe
ENV EDGEPIPE_MODELS_DIR=/opt/edgepipe/models

# A user without root whose home and working folder is the /data volume: outputs (a relative
# --output lands there) and the optimized-model cache. Owned before VOLUME, so that a named
# volume starts writable (a bind-mounted host folder must be writable by uid 10001).
RUN useradd --system --uid 10001 --user-group --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin edgepipe \
 && mkdir -p /data/cache \
 && chown -R edgepipe:edgepipe /data
ENV EDGEPIPE_CACHE_DIR=/data/cache
VOLUME /data
WORKDIR /data
USER edgepipe

# `edgepipe run` keeps this heartbeat fresh; the health check fails if the pipeline hangs.
ENV EDGEPIPE_HEALTH_FILE=/tmp/edgepipe.health
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["edgepipe", "health", "/tmp/edgepipe.health", "--max-age", "30"]

# SIGTERM (docker stop) drains the pipeline and exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["edgepipe"]
CMD ["run", "/app/pipelines/demo.py"]
