"""``OperationLLMs``: the provider of each LLM operation, and what ``status`` says of them.

Built from the per-operation routes (``infra/llm_routes.py``, ADR-0052) by
``factory.make_operation_llms``: one provider per distinct (base URL, key, model, timeout,
retries), so operations on one endpoint and model share one client and its connection pool —
a deployment with no per-operation setting has exactly one provider, as before. Tests (and
``Memory.open(llm=...)``) pass providers directly: ``OperationLLMs.same(p)`` is "this one for
every operation", ``with_overrides({"rerank": q})`` replaces some.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engramdb.domain.ports import LLMProvider
from engramdb.infra.llm_routes import OPERATIONS, LLMRoute


@dataclass(frozen=True)
class OperationLLMs:
    """Provider (or ``None``: offline) and, when built from settings, route per operation."""

    providers: Mapping[str, LLMProvider | None]
    routes: Mapping[str, LLMRoute | None]

    @classmethod
    def same(cls, llm: LLMProvider | None) -> OperationLLMs:
        return cls({op: llm for op in OPERATIONS}, {})

    def __post_init__(self) -> None:
        unknown = sorted(set(self.providers) - set(OPERATIONS))
        if unknown:
            raise ValueError(f"unknown LLM operation(s) {', '.join(unknown)}; "
                             f"expected some of {', '.join(OPERATIONS)}")

    def get(self, operation: str) -> LLMProvider | None:
        if operation not in OPERATIONS:
            raise ValueError(f"unknown LLM operation {operation!r}")
        return self.providers.get(operation)

    def timeout_sec(self, operation: str, default: float) -> float:
        """The operation's own timeout when its route names one, else ``default``."""
        route = self.routes.get(operation)
        return route.timeout_sec if route is not None else default

    def with_overrides(self, overrides: Mapping[str, LLMProvider | None]) -> OperationLLMs:
        """These operations use the given providers (an explicit provider has no route)."""
        providers = {**self.providers, **overrides}
        routes = {op: r for op, r in self.routes.items() if op not in overrides}
        return OperationLLMs(providers, routes)

    def wrapped(self, wrap: Callable[[LLMProvider], LLMProvider]) -> OperationLLMs:
        """Each distinct provider wrapped once (shared ones stay shared)."""
        done: dict[int, LLMProvider] = {}
        out: dict[str, LLMProvider | None] = {}
        for op in OPERATIONS:
            p = self.providers.get(op)
            if p is not None and id(p) not in done:
                done[id(p)] = wrap(p)
            out[op] = None if p is None else done[id(p)]
        return OperationLLMs(out, dict(self.routes))

    def distinct(self) -> int:
        return len({id(p) for p in self.providers.values() if p is not None})

    def describe(self) -> dict[str, dict[str, Any]]:
        """Per operation: ``model`` (the provider's name, as provenance records it),
        ``endpoint`` (host only, never a key) and ``configured`` (``settings`` / ``global``
        / ``explicit`` / ``off``)."""
        out: dict[str, dict[str, Any]] = {}
        for op in OPERATIONS:
            provider, route = self.providers.get(op), self.routes.get(op)
            if provider is None:
                out[op] = {"model": None, "endpoint": None, "configured": "off"}
            elif route is None:
                out[op] = {"model": provider.name, "endpoint": None, "configured": "explicit"}
            else:
                out[op] = {"model": provider.name, "endpoint": route.host,
                           "configured": "own: " + ", ".join(route.own) if route.own else "global"}
        return out
