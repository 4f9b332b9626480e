"""The complete part of a JSON answer that was cut off (issue 26, ADR-0045).

Why: a small local model sometimes runs away — one 20-word turn answered with ~2,000 tokens,
its fact list repeating itself — until the server's context window or our ``max_tokens``
cuts it. The cut answer is invalid JSON, and before this module the whole message yielded
no facts, although its first facts were complete and usually the good ones (10 of 163
extraction calls on LoCoMo ``conv-26`` sessions 1–8). ``salvage_prefix`` keeps every array
element that was closed before the cut and closes what is still open, so the answer reads
as the list that was being written, minus its unfinished tail. Only elements the model
finished are kept: a half-written fact is never completed by guessing.
"""

from __future__ import annotations

import json
from typing import Any

_CLOSERS = {"{": "}", "[": "]"}


def salvage_prefix(text: str) -> dict[str, Any] | None:
    """The JSON object ``text`` began, cut back to its last complete array element (or
    member value), every open bracket closed; ``None`` when nothing complete is there."""
    start = text.find("{")
    if start < 0:
        return None
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []  # (end index, closers) where a prefix may end
    in_string = escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in _CLOSERS:
            stack.append(char)
        elif char in "}]":
            if not stack or _CLOSERS[stack[-1]] != char:
                break  # not JSON any more: keep what was complete before
            stack.pop()
            if not stack:
                return _loads(text[start:index + 1])  # complete after all
            if stack[-1] == "[":  # an element of a list was just finished
                cuts.append((index + 1, _closing(stack)))
    for end, closers in reversed(cuts):
        found = _loads(text[start:end] + closers)
        if found is not None:
            return found
    return None


def _closing(stack: list[str]) -> str:
    return "".join(_CLOSERS[opener] for opener in reversed(stack))


def _loads(candidate: str) -> dict[str, Any] | None:
    try:
        data = json.loads(candidate)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
