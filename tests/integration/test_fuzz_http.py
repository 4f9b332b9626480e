"""Property-based fuzz of the HTTP API (schemathesis, from the OpenAPI document of the live
ASGI app — the same document as ``docs/openapi.json``, checked elsewhere) on the real
``Memory`` facade (real PostgreSQL and projectors). Valid and invalid requests alike must
never be a 500 (issue 10, item 4). Bounded and deterministic for CI: a fixed number of
examples per operation, derandomized."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from psycopg import sql
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from engramdb.infra.database import es_env_from_url
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.memory.facade import Memory

EXAMPLES_PER_OPERATION = 25


@pytest.fixture(scope="module")
def fuzz_memory(pg_url: str) -> Iterator[Memory]:
    schema = f"fuzz_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    with Memory.open(env=es_env_from_url(pg_url, schema), embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        memory.write("fuzz-agent", "I live in Recife and I work at Vertix.", speaker="Ana", message_id="seed-1")
        yield memory
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _fuzz(operation: Any, mode: GenerationMode) -> int:
    calls = 0

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES_PER_OPERATION, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def run(case: Any) -> None:
        nonlocal calls
        response = case.call()
        calls += 1
        case.validate_response(response, checks=[not_a_server_error])
        assert response.status_code < 500, (case.method, case.formatted_path, response.status_code, response.text)

    run()
    return calls


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_is_a_server_error(fuzz_memory: Memory, mode: GenerationMode) -> None:
    app = create_app(fuzz_memory)
    documented = json.loads(Path("docs/openapi.json").read_text(encoding="utf-8"))
    assert documented == json.loads(json.dumps(app.openapi())), "docs/openapi.json is stale: regenerate it"
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    calls = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        try:
            calls[operation.label] = _fuzz(operation, mode)
        except Unsatisfiable:  # no invalid input exists (no parameters, or free-form strings only)
            assert mode is GenerationMode.NEGATIVE and not operation.body, operation.label
            calls[operation.label] = 0
    assert len(calls) >= 6, calls
    assert all(n > 0 for label, n in calls.items() if mode is GenerationMode.POSITIVE or "POST" in label), calls
