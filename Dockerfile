# forklog: the HTTP service (`python -m app`) with its sessions in the /data volume and its keys file (hashes only)
# at /run/secrets/forklog-keys: it listens on every address, so it does not start without keys (see the README).
#   python -m app keys new --tenant default --scope read --scope write --keys-file keys.jsonl && chmod 644 keys.jsonl
#   docker build -t forklog . && docker run -p 8000:8000 -v forklog-data:/data \
#       -v "$PWD/keys.jsonl:/run/secrets/forklog-keys:ro" forklog
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# `pip install .` of the project (the app package and its dependencies); the sources are not kept.
COPY pyproject.toml README.md /tmp/forklog/
COPY app /tmp/forklog/app
RUN pip install /tmp/forklog && rm -rf /tmp/forklog

# A non-root user owns the data directory; a new named volume mounted at /data starts with this ownership.
RUN groupadd --system --gid 10001 forklog \
    && useradd --system --uid 10001 --gid forklog --create-home --home-dir /home/forklog \
        --shell /usr/sbin/nologin forklog \
    && mkdir /data \
    && chown forklog:forklog /data
VOLUME ["/data"]

# Settings are FORKLOG_* variables (docker run -e FORKLOG_LOG_LEVEL=debug ...); see the README.
ENV FORKLOG_DATA_DIR=/data \
    FORKLOG_HOST=0.0.0.0 \
    FORKLOG_PORT=8000 \
    FORKLOG_KEYS_FILE=/run/secrets/forklog-keys

USER 10001:10001
WORKDIR /home/forklog
EXPOSE 8000

# Liveness: GET /healthz with Python's urllib (the slim image has no curl); an error or a non-2xx exits non-zero.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('FORKLOG_PORT', '8000') + '/healthz', timeout=4).close()"]

# uvicorn shuts down gracefully on SIGTERM (docker stop).
CMD ["python", "-m", "app"]
