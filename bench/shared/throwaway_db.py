"""The database a benchmark runs on: the URL it was given, or a throwaway embedded
PostgreSQL (pgvector) in a temp dir, stopped and removed afterwards.

Why one helper: a benchmark must neither read nor pollute real memory, and each latency
bench had its own copy of start / extensions / stop / remove.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def database_url(given: str | None, prefix: str = "engramdb-bench-") -> Iterator[str]:
    if given:
        yield given
        return
    from engramdb.infra.database import ensure_extensions
    from engramdb.infra.embedded_postgres import ensure_postgres

    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    handle = None
    try:
        handle = ensure_postgres(tmp, fast_unsafe=True)
        ensure_extensions(handle.url)
        yield handle.url
    finally:
        if handle is not None:
            handle.stop()
        shutil.rmtree(tmp, ignore_errors=True)
