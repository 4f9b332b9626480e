"""Request examples for the OpenAPI page: what Swagger's "Try it out" sends (ADR-0050).

Why examples and not only schemas: without one, Swagger builds a body from the schema, and
that body fails our own validation — ``wait_for`` 9223372036854776000 (2^63 - 1 rounded by
JavaScript: a 422) and ``config_overrides {"additionalProp1": {}}`` (an unknown key: a 422).
A first-time user's first click was an error. Each example here is sent by a test
(``tests/integration/test_openapi_examples.py``) and must succeed.
"""

from __future__ import annotations

from typing import Any

WRITE_EXAMPLES: dict[str, Any] = {
    "a turn": {
        "summary": "one user turn",
        "value": {"agent_id": "agent-1", "text": "I moved to Porto Alegre", "speaker": "Ana"},
    },
    "with ids": {
        "summary": "with your message id (idempotent) and a session",
        "value": {
            "agent_id": "agent-1", "message_id": "m-42", "session_id": "s-1",
            "speaker": "Ana", "text": "I have a dog called Rex",
        },
    },
}

RETRIEVE_EXAMPLES: dict[str, Any] = {
    "a question": {
        "summary": "what memory knows for a question",
        "value": {"agent_id": "agent-1", "query": "Where does Ana live?"},
    },
    "read your write": {
        "summary": "wait until a write (its position) is visible, with a smaller context",
        "value": {
            "agent_id": "agent-1", "query": "Where does Ana live?", "wait_for": 1,
            "config_overrides": {"topk_facts": 5},
        },
    },
}

FACTS_EXAMPLES: dict[str, Any] = {
    "a fact": {
        "summary": "a fact the client decided (no extraction)",
        "value": {"agent_id": "agent-1", "facts": [{"subject": "Ana", "text": "Ana is vegetarian"}]},
    },
    "a single-valued attribute": {
        "summary": "a new value of an attribute_key replaces the old one (UPDATE)",
        "value": {
            "agent_id": "agent-1",
            "facts": [{"subject": "Ana", "text": "Ana lives in Lisbon", "attribute_key": "residence"}],
        },
    },
}
