# faultfinder sidecar image: `docker run -p 4317:4317 -p 4318:4318 faultfinder serve --host 0.0.0.0`
FROM python:3.11-slim

WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    FAULTFINDER_HOST=0.0.0.0 \
    FAULTFINDER_DATABASE_URL=sqlite+aiosqlite:////data/faultfinder.db

COPY pyproject.toml README.md LICENSE ./
COPY faultfinder ./faultfinder
RUN pip install --no-cache-dir . && mkdir -p /data

VOLUME /data
EXPOSE 4317 4318
ENTRYPOINT ["faultfinder"]
CMD ["serve"]
