"""Fixtures every kind of test may use; none starts a server.

The suite is split by what a test needs (ADR-0043): ``tests/unit`` runs with no server
(``pytest tests/unit``), ``tests/integration`` gets ONE real PostgreSQL and ONE real NATS per
run from its own ``conftest.py``, ``tests/support`` holds fake servers and harnesses.
"""

from __future__ import annotations

import os
import uuid

import pytest

# 2-core machine. Set at conftest import, i.e. before any test module imports numpy/onnx.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def agent_id() -> str:
    return f"agent-{uuid.uuid4().hex}"
