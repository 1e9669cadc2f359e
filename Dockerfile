# edgepipe for headless use on an edge box (README, "Docker"):
#   docker build -t edgepipe .                                      # CPU (onnxruntime)
#   docker build -t edgepipe:nvidia --build-arg FLAVOR=nvidia .     # NVIDIA GPU (onnxruntime-gpu)
#   docker run --rm -v edgepipe-data:/data edgepipe                 # the built-in demo
#   docker run --rm -v edgepipe-data:/data edgepipe run /app/pipelines/face_privacy.py --output blurred.mp4
# Outputs and the optimized-model cache go to the /data volume (the working folder); the models
# of the shipped pipelines are in the image, so the container needs no network at run time.

# Bases pinned to a Python minor version and a distribution release; pin a digest with
# --build-arg BASE=python:3.11-slim-bookworm@sha256:... (docker buildx imagetools inspect BASE).
ARG BASE=python:3.11-slim-bookworm
# onnxruntime-gpu at constraints.txt's version is built for CUDA 13 and cuDNN 9: the host needs
# an NVIDIA driver of the 580 series or newer, and the NVIDIA Container Toolkit (--gpus all).
ARG NVIDIA_BASE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu22.04
# cpu or nvidia (scripts/image_requirements.py knows what each installs).
ARG FLAVOR=cpu

FROM ${BASE} AS python-cpu

# Ubuntu 22.04's python3 is 3.10; its universe has 3.11, run from a virtual environment.
FROM ${NVIDIA_BASE} AS python-nvidia
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# The pinned requirements, from the project's list and constraints.txt alone. Copied into the
# image by content: an edit of pyproject.toml that changes no dependency reinstalls nothing.
FROM python-${FLAVOR} AS requirements
ARG FLAVOR
# Extras of the project to install too, comma-separated: --build-arg EXTRAS=lm.
ARG EXTRAS=
WORKDIR /src
COPY pyproject.toml constraints.txt scripts/image_requirements.py ./
RUN python image_requirements.py --flavor "$FLAVOR" --extras "$EXTRAS" > requirements.txt

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
