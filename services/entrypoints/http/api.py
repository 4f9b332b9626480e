"""HTTP surface of engramdb (FastAPI): retrieve, write, manage, audit, health.

``create_app(memory)`` takes anything with the ``Memory`` facade's methods (``retrieve``,
``write``, ``history``, ``facts_as_of``, optionally ``health``) and wires the routers: each
router module holds one family of routes and reads the facade from ``app.state.memory``.
``python -m engramdb.services.entrypoints.http.api`` writes ``docs/openapi.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI

from engramdb.services.entrypoints.http import (
    flows_routes,
    health_routes,
    mem0_routes,
    memory_routes,
)
from engramdb.services.entrypoints.http.docs import add_offline_docs
from engramdb.services.entrypoints.http.errors import install_error_handlers
from engramdb.services.entrypoints.http.guard import DEFAULT_MAX_BODY_BYTES, install_input_guards
from engramdb.services.entrypoints.http.manage_routes import forbid_unknown_query
from engramdb.services.entrypoints.http.manage_routes import router as manage_router
from engramdb.services.entrypoints.http.ui import mount_ui

API_VERSION = "1"  # the /v1 of the paths; the document's version is the package's


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("engramdb")
    except PackageNotFoundError:
        return "0+unknown"


def create_app(
    memory: Any, *, title: str = "engramdb", max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> FastAPI:
    app = FastAPI(
        title=title,
        version=_package_version(),
        description="Event-sourced long-term memory for LLM agents: write conversation turns, "
        "retrieve scored facts and a prompt-ready context, audit how a memory came to be.",
        dependencies=[Depends(forbid_unknown_query)],
        docs_url=None,  # add_offline_docs serves /docs and /redoc without a CDN
        redoc_url=None,
    )
    add_offline_docs(app)
    app.state.memory = memory
    install_input_guards(app, max_body_bytes)
    app.include_router(memory_routes.router)
    app.include_router(health_routes.router)
    app.include_router(manage_router)
    mount_ui(app)  # the web inspector at /ui (ADR-0044)
    app.include_router(mem0_routes.router)  # the Mem0 platform routes (issue 24)
    app.include_router(flows_routes.router)
    install_error_handlers(app)
    return app


def export_openapi(path: str | Path = "docs/openapi.json") -> Path:
    """Write the OpenAPI document (no memory needed: the schema does not depend on it)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = create_app(memory=None).openapi()
    out.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":  # python -m engramdb.services.entrypoints.http.api [path]
    print(export_openapi(*(sys.argv[1:2] or ["docs/openapi.json"])))
