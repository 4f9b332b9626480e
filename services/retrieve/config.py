"""Every knob of the read pipeline (docs/spec.md, section 3), in sections, overridable per call.

Why a frozen pydantic model with ``extra="forbid"``: a misspelt override
(``{"topk_fact": 5}``) must fail loudly, naming the key, instead of being silently ignored
and leaving the caller wondering why nothing changed. Every number is bounded, and NaN and
infinities are refused, because overrides come from any HTTP/NATS caller: an unbounded
``candidate_pool`` reached pgvector's ``hnsw.ef_search`` limit (1000) and turned a bad
request into a 500 (ADR-0006, bounded overrides).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engramdb.services.retrieve.config_sections import (
    DEFAULT_RRF_WEIGHTS,
    DEFAULT_SCORE_WEIGHTS,
    DEFAULT_SIGNAL_WEIGHTS,
    Candidates,
    Context,
    Filters,
    Fusion,
    Graph,
    Planner,
    Rerank,
    ResultSizes,
    Scoring,
    Spreading,
    Sweeps,
    TailLists,
    _Section,
)


class UnknownConfigKey(ValueError):
    """A ``config_overrides`` key that ``RetrieveConfig`` does not have."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        super().__init__(
            "unknown retrieve config key(s): "
            + ", ".join(repr(k) for k in keys)
            + f" (known: {', '.join(sorted(FLAT_KEYS))}, or by section: "
            + f"{', '.join(SECTION_TYPES)})"
        )


SECTION_TYPES: dict[str, type[_Section]] = {
    "sizes": ResultSizes,
    "filters": Filters,
    "scoring": Scoring,
    "fusion": Fusion,
    "sweeps": Sweeps,
    "tail_lists": TailLists,
    "candidates": Candidates,
    "graph": Graph,
    "planner": Planner,
    "spreading": Spreading,
    "rerank": Rerank,
    "context": Context,
}
# flat key -> its section: every field name is unique across sections
FLAT_KEYS: dict[str, str] = {
    name: section for section, model in SECTION_TYPES.items() for name in model.model_fields
}


def by_section(overrides: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``overrides`` (flat keys, section objects, or both) grouped by section."""
    grouped: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        if key in SECTION_TYPES and isinstance(value, Mapping):
            grouped.setdefault(key, {}).update(value)
        else:
            grouped.setdefault(FLAT_KEYS[key], {})[key] = value
    return grouped


def unknown_keys(overrides: Mapping[str, Any]) -> list[str]:
    """The keys of ``overrides`` no section has (``section.key`` for one inside a section)."""
    unknown: list[str] = []
    for key, value in overrides.items():
        if key in SECTION_TYPES and isinstance(value, Mapping):
            fields = SECTION_TYPES[key].model_fields
            unknown += [f"{key}.{inner}" for inner in value if inner not in fields]
        elif key not in FLAT_KEYS:
            unknown.append(key)
    return sorted(unknown)


class RetrieveConfig(BaseModel):
    """Read-pipeline configuration in sections (``config.sizes.topk_facts``). Defaults are
    the seed's (docs/spec.md, section 3) unless marked *(engramdb)*.

    Every field name is unique across sections, so callers may also give keys flat, as
    before the sections existed: ``RetrieveConfig(topk_facts=5)`` and
    ``with_overrides({"topk_facts": 5})`` mean ``sizes.topk_facts`` (ADR-0043)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    sizes: ResultSizes = Field(default_factory=ResultSizes)
    filters: Filters = Field(default_factory=Filters)
    scoring: Scoring = Field(default_factory=Scoring)
    fusion: Fusion = Field(default_factory=Fusion)
    sweeps: Sweeps = Field(default_factory=Sweeps)
    tail_lists: TailLists = Field(default_factory=TailLists)
    candidates: Candidates = Field(default_factory=Candidates)
    graph: Graph = Field(default_factory=Graph)
    planner: Planner = Field(default_factory=Planner)
    spreading: Spreading = Field(default_factory=Spreading)
    rerank: Rerank = Field(default_factory=Rerank)
    context: Context = Field(default_factory=Context)

    @model_validator(mode="before")
    @classmethod
    def _accept_flat_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or not any(k in FLAT_KEYS for k in data):
            return data
        nested: dict[str, Any] = {}
        for key, value in data.items():
            if key in FLAT_KEYS:
                section = nested.setdefault(FLAT_KEYS[key], {})
                if isinstance(section, Mapping) and not isinstance(section, dict):
                    section = nested[FLAT_KEYS[key]] = dict(section)
                if isinstance(section, BaseModel):
                    section = nested[FLAT_KEYS[key]] = section.model_dump()
                section[key] = value
            elif key in SECTION_TYPES and isinstance(nested.get(key), dict):
                given = value.model_dump() if isinstance(value, BaseModel) else dict(value)
                nested[key] = {**given, **nested[key]}
            else:
                nested[key] = value
        return nested

    def weight(self, key: str) -> float:
        return self.scoring.score_weights.get(key, DEFAULT_SCORE_WEIGHTS.get(key, 0.0))

    def signal_weight(self, key: str) -> float:
        return self.scoring.signal_weights.get(key, DEFAULT_SIGNAL_WEIGHTS.get(key, 0.0))

    def hop_decay(self, hop: int) -> float:
        decays = self.graph.graph_hop_decay
        return decays[min(hop, len(decays) - 1)]

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> RetrieveConfig:
        """A copy with ``overrides`` applied, each key flat (``{"topk_facts": 5}``) or by
        section (``{"sizes": {"topk_facts": 5}}``). Unknown keys raise ``UnknownConfigKey``;
        bad values raise pydantic's ``ValidationError`` (a ``ValueError``) naming the field.
        Dict-valued fields merge (``{"score_weights": {"recency": 0}}`` keeps the others)."""
        if not overrides:
            return self
        unknown = unknown_keys(overrides)
        if unknown:
            raise UnknownConfigKey(unknown)
        data = self.model_dump()
        for section, values in by_section(overrides).items():
            for key, value in values.items():
                current = data[section].get(key)
                if isinstance(current, dict) and isinstance(value, Mapping):
                    data[section][key] = {**current, **value}
                else:
                    data[section][key] = value
        try:
            return type(self).model_validate(data)
        except ValidationError as exc:
            raise _as_given(exc, overrides) from None


def _as_given(exc: ValidationError, overrides: Mapping[str, Any]) -> ValidationError:
    """``exc`` with each error's location spelt as the caller spelt the key: a flat key's
    error names ``topk_facts``, not ``sizes.topk_facts`` (HTTP's 422 ``loc`` shows it)."""
    errors: list[Any] = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        if len(loc) > 1 and loc[0] in SECTION_TYPES and loc[1] in overrides:
            loc = loc[1:]
        errors.append({"type": err["type"], "loc": loc, "input": err.get("input"),
                       "ctx": err.get("ctx", {})})
    return ValidationError.from_exception_data(exc.title, errors)


__all__ = [
    "DEFAULT_RRF_WEIGHTS",
    "DEFAULT_SCORE_WEIGHTS",
    "DEFAULT_SIGNAL_WEIGHTS",
    "FLAT_KEYS",
    "RetrieveConfig",
    "UnknownConfigKey",
    "ValidationError",
    "ResultSizes",
    "Filters",
    "Scoring",
    "Fusion",
    "Sweeps",
    "TailLists",
    "Candidates",
    "Graph",
    "Planner",
    "Spreading",
    "Rerank",
    "Context",
]
