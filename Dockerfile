# faultfinder sidecar image: `docker run -p 4317:4317 -p 4318:4318 faultfinder serve --host 0.0.0.0`
#
# Runs as the unprivileged user 10001 (numeric, so that Kubernetes' runAsNonRoot can check
# it). What it writes: the SQLite database under /data (a volume owned by that user) and
# temporary files under /tmp; everything else may be mounted read-only.
FROM python:3.11-slim

WORKDIR /app
# Reached by whatever name the container is given (a service name, a pod address):
# every Host is answered. Set FAULTFINDER_ALLOWED_HOSTS to the names in use, and API keys,
# where a browser on the same machine could reach it.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    FAULTFINDER_HOST=0.0.0.0 \
    FAULTFINDER_ALLOWED_HOSTS=* \
    FAULTFINDER_DATABASE_URL=sqlite+aiosqlite:////data/faultfinder.db

COPY pyproject.toml README.md LICENSE ./
COPY faultfinder ./faultfinder
RUN pip install --no-cache-dir . \
    && groupadd --system --gid 10001 faultfinder \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin faultfinder \
    && mkdir -p /data \
    && chown 10001:10001 /data

USER 10001:10001
VOLUME /data
EXPOSE 4317 4318

# `serve` (the default command) answers /healthz on its HTTP port; the slim image has no
# curl, so Python asks. `faultfinder worker` has no HTTP port: deployments override this
# with a check of the worker's --heartbeat-file (deploy/compose.yaml, deploy/k8s).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('FAULTFINDER_PORT', '4318') + '/healthz', timeout=4)"]

ENTRYPOINT ["faultfinder"]
CMD ["serve"]
