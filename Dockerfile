# edgepipe for headless use on an edge box.
#   docker build -t edgepipe .
#   docker run --rm edgepipe                                   # the built-in demo
#   docker run --rm -v "$PWD/pipelines:/app/pipelines:ro" edgepipe run pipelines/NAME.py --source rtsp://...
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, pinned, so that a code change does not reinstall them.
COPY pyproject.toml README.md constraints.txt ./
COPY edgepipe ./edgepipe
RUN pip install -c constraints.txt .

COPY pipelines ./pipelines

RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin edgepipe

# The models the shipped pipelines use are fetched (and checksummed) at build time, so that the
# container needs no network at run time; the cache stays writable for the optimized graphs.
ENV EDGEPIPE_CACHE_DIR=/var/cache/edgepipe
RUN edgepipe models pull centerface && chown -R edgepipe /var/cache/edgepipe
USER edgepipe

# `edgepipe run` keeps this heartbeat fresh; the health check fails if the pipeline hangs.
ENV EDGEPIPE_HEALTH_FILE=/tmp/edgepipe.health
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["edgepipe", "health", "/tmp/edgepipe.health", "--max-age", "30"]

# SIGTERM (docker stop) drains the pipeline and exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["edgepipe"]
CMD ["run", "pipelines/demo.py"]
