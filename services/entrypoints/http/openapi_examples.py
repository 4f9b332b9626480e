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

WEBHOOK_EXAMPLES: dict[str, Any] = {
    "one agent": {
        "summary": "deliver one agent's changes (the answer holds the generated secret, once)",
        "value": {"url": "https://hooks.example.com/engramdb", "agent_id": "agent-1"},
    },
    "a tenant": {
        "summary": "every agent whose id starts with a prefix, with your own secret",
        "value": {"url": "https://hooks.example.com/tenant-a", "agent_prefix": "tenant-a:",
                  "secret": "a-shared-secret-of-32-characters", "max_attempts": 5},
    },
}

# Mem0's platform routes (ADR-0047): the bodies the official ``mem0ai`` client sends
MEM0_ADD_EXAMPLES: dict[str, Any] = {
    "a user's messages": {
        "summary": "extract and decide, into the user's memory",
        "value": {"messages": [{"role": "user", "content": "I'm vegetarian and I live in Lisbon"}],
                  "user_id": "ana"},
    },
    "stored only": {
        "summary": "record the turn without extraction (infer false), in one run of one agent",
        "value": {"messages": [{"role": "user", "content": "Remind me to call Rui"}],
                  "user_id": "ana", "agent_id": "planner", "run_id": "trip-1", "infer": False,
                  "metadata": {"channel": "slack"}},
    },
}

MEM0_SEARCH_EXAMPLES: dict[str, Any] = {
    "a user's memory": {
        "summary": "search one user's memory",
        "value": {"query": "What does Ana eat?", "filters": {"user_id": "ana"}, "top_k": 5},
    },
    "narrowed": {
        "summary": "narrowed to a run and a metadata value (inside SQL, before ranking)",
        "value": {"query": "Who should Ana call?",
                  "filters": {"AND": [{"user_id": "ana"}, {"run_id": "trip-1"},
                                      {"metadata": {"channel": "slack"}}]}},
    },
}
