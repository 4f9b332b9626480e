"""Where the database and broker are: external URLs from ``Settings`` or the embedded servers.

Everything that needs PostgreSQL asks here, so "external vs embedded" is decided once. The
eventsourcing library is configured through environment-style keys (``POSTGRES_*``), so a
``DatabaseConfig`` carries both a libpq URL (psycopg, pgvector) and that env dict.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from psycopg.conninfo import conninfo_to_dict

from engramdb.infra.embedded_postgres import PostgresHandle, ensure_postgres

if TYPE_CHECKING:
    from engramdb.infra.settings import Settings

log = logging.getLogger(__name__)

REQUIRED_EXTENSIONS = ("vector",)
# pg_trgm is contrib; the embedded PostgreSQL 18 build does not ship it, so it is optional:
# callers check ``"pg_trgm" in ensure_extensions(url)`` before relying on trigram indexes.
OPTIONAL_EXTENSIONS = ("pg_trgm",)
_NOTED_MISSING: set[str] = set()  # issue 27: the notice was an INFO line on every serve
_EXTENSION_LOCK_KEY = 0x656E6772616D  # advisory lock: concurrent CREATE EXTENSION races


@dataclass(frozen=True)
class DatabaseConfig:
    url: str
    env: dict[str, str]
    schema: str = "public"
    handle: PostgresHandle | None = field(default=None, repr=False, compare=False)

def es_env_from_url(url: str, schema: str = "public") -> dict[str, str]:
    """eventsourcing persistence env for a libpq URL (``POSTGRES_SCHEMA`` only if non-public)."""
    parts = conninfo_to_dict(url)
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": str(parts.get("dbname") or parts.get("user") or "postgres"),
        "POSTGRES_HOST": str(parts.get("host") or "localhost"),
        "POSTGRES_PORT": str(parts.get("port") or "5432"),
        "POSTGRES_USER": str(parts.get("user") or "postgres"),
        "POSTGRES_PASSWORD": str(parts.get("password") or ""),
    }
    if schema and schema != "public":
        env["POSTGRES_SCHEMA"] = schema
    return env


def resolve_database(settings: Settings, *, fast_unsafe: bool = False) -> DatabaseConfig:
    """External ``ENGRAMDB_DATABASE_URL`` if set, else start/reuse the embedded server.

    The returned ``handle`` (embedded only) should be ``stop()``-ed by whoever owns the process
    lifetime; it is also released at interpreter exit.
    """
    schema = settings.db_schema
    if settings.database_url:
        url = settings.database_url
        return DatabaseConfig(url=url, env=es_env_from_url(url, schema), schema=schema)
    handle = ensure_postgres(settings.data_dir, fast_unsafe=fast_unsafe)
    return DatabaseConfig(
        url=handle.url, env=es_env_from_url(handle.url, schema), schema=schema, handle=handle
    )


def ensure_extensions(url: str, schema: str = "public") -> dict[str, str]:
    """Create ``vector`` (required, ≥ 0.8) and ``pg_trgm`` (if available) in ``public``,
    and ``schema`` if it is not public. Returns ``{extension: installed version}``."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_EXTENSION_LOCK_KEY,))
            if schema != "public":
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
                )
            available = {
                row[0]
                for row in conn.execute(
                    "SELECT name FROM pg_available_extensions WHERE name = ANY(%s)",
                    (list(REQUIRED_EXTENSIONS + OPTIONAL_EXTENSIONS),),
                )
            }
            missing = [ext for ext in REQUIRED_EXTENSIONS if ext not in available]
            if missing:
                raise RuntimeError(
                    f"PostgreSQL at {conninfo_to_dict(url).get('host')} lacks {missing}"
                )
            for ext in REQUIRED_EXTENSIONS + OPTIONAL_EXTENSIONS:
                if ext in available:
                    conn.execute(
                        sql.SQL("CREATE EXTENSION IF NOT EXISTS {} WITH SCHEMA public").format(
                            sql.Identifier(ext)
                        )
                    )
                elif ext not in _NOTED_MISSING:  # expected on the embedded build: once, at debug
                    _NOTED_MISSING.add(ext)
                    log.debug("optional extension %s is not available; skipping", ext)
        rows = conn.execute(
            "SELECT extname, extversion FROM pg_extension WHERE extname = ANY(%s)",
            (list(REQUIRED_EXTENSIONS + OPTIONAL_EXTENSIONS),),
        ).fetchall()
    return {name: version for name, version in rows}


def resolve_nats(settings: Settings) -> str:
    """External ``ENGRAMDB_NATS_URL`` (plus ``ENGRAMDB_NATS_USER``/``_PASSWORD``) if set, else
    the embedded server's URL with the service credentials (started or reused; released at
    interpreter exit — use ``EmbeddedServers`` for explicit lifetime)."""
    if settings.nats_url:
        from engramdb.infra.nats_auth import with_credentials

        return with_credentials(settings.nats_url, settings.nats_user, settings.nats_password)
    from engramdb.infra.embedded_nats import ensure_nats

    return ensure_nats(settings.data_dir).url
