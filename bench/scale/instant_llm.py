"""The instant LLM of the scale bench: a deterministic OpenAI-compatible HTTP server.

Why a real HTTP server and not an in-process double: the ``serve`` processes under test are
separate processes configured like production (``ENGRAMDB_LLM_BASE_URL``), so they reach the
LLM through the real ``openai`` client and real HTTP, as they would a hosted model — only the
model's thinking time is removed. The server is ``tests/support/fake_openai_server.py``; this module
is its script. It answers each request kind the serve path sends the way a model following
the prompt would: extraction (one fact per message; "I live in X." as a residence), entity
resolution (the first candidate offered), anything else (a short plain answer).
"""

from __future__ import annotations

import json
import re
from typing import Any

LIVES = re.compile(r"^I live in (\w+)\.$")


def _message(body: dict[str, Any]) -> str | None:
    user = next((m["content"] for m in reversed(body.get("messages", [])) if m.get("role") == "user"), "")
    if 'Message:\n"""\n' not in user:
        return None
    return str(user.split('Message:\n"""\n', 1)[1].rsplit('\n"""', 1)[0])


def answer(body: dict[str, Any]) -> str:
    """The script of ``run_fake_openai``: request body -> assistant content."""
    schema = ((body.get("response_format") or {}).get("json_schema") or {})
    if schema.get("name") == "engramdb_resolution":
        match = schema["schema"]["properties"]["match"]["anyOf"][0].get("enum") or [None]
        return json.dumps({"match": match[0]})
    text = _message(body)
    if text is None:
        return "Nothing to add."
    lives = LIVES.match(text)
    fact: dict[str, Any] = {"text": f"Ana said: {text}", "entity": "Ana",
                            "confidence_level": "explicit_statement"}
    if lives:
        fact = {**fact, "text": f"Ana lives in {lives.group(1)}", "attribute_key": "residence"}
    return json.dumps({"facts": [fact], "entities": [{"name": "Ana", "entity_type": "person"}],
                       "relationships": []})
