"""Entity resolution with the LLM fallback (docs/spec.md §2 step 4): the I/O half of
``domain.resolution``.

The pure resolver answers self / exact / fuzzy / new, or "ambiguous" with candidates for
names that are similar to a known entity but not enough to merge automatically. Only then
is the LLM asked (one short JSON call per ambiguous name, ``resolution/v1`` prompt). If it
is disabled, fails, times out, or names something that is not a candidate, the name becomes
a new entity — a duplicate beats a wrong merge and beats lost data.

LLM answers are memoised per message (``ResolutionMemo``), so when a concurrency conflict
makes the pipeline re-decide on fresh state, the same question is not paid twice.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.extraction import Extraction
from engramdb.domain.keys import match_key
from engramdb.domain.ports import LLMProvider
from engramdb.domain.resolution import (
    AMBIGUOUS_FLOOR,
    FUZZY_MERGE_THRESHOLD,
    Resolution,
    resolve_name,
)
from engramdb.infra.llm_timeout import call_with_timeout
from engramdb.infra.prompt_files import PromptTemplate, load_prompt
from engramdb.services.extraction.llm_budget import resolution_max_tokens

log = logging.getLogger(__name__)

RESOLUTION_PROMPT_VERSION = "resolution/v1"
DEFAULT_ENTITY_TYPE = "person"  # same default as ``ExtractedEntity.entity_type``


def resolution_response_format(candidate_keys: list[str]) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "engramdb_resolution",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"match": {"anyOf": [{"type": "string", "enum": candidate_keys}, {"type": "null"}]}},
                "required": ["match"],
                "additionalProperties": False,
            },
        },
    }


@dataclass
class ResolutionMemo:
    """LLM answers of one message: (folded name, candidate keys) → chosen key or None."""

    answers: dict[tuple[str, tuple[str, ...]], str | None] = field(default_factory=dict)
    llm_calls: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class ResolutionOutcome:
    resolutions: dict[str, Resolution]
    llm_calls: int = 0  # calls made for this outcome (0 when all answers came from the memo)
    errors: list[str] = field(default_factory=list)


def names_of(extraction: Extraction) -> list[tuple[str, str]]:
    """Every (name, entity_type) the extraction uses, first occurrence wins, stable order."""
    types = {match_key(e.name): e.entity_type or DEFAULT_ENTITY_TYPE for e in extraction.entities}
    seen: dict[str, tuple[str, str]] = {}

    def add(name: str) -> None:
        folded = match_key(name)
        if folded and folded not in seen:
            seen[folded] = (name, types.get(folded, DEFAULT_ENTITY_TYPE))

    for ent in extraction.entities:
        add(ent.name)
    for fact in extraction.facts:
        add(fact.entity)
        for mention in fact.mentions:
            add(mention)
    for rel in extraction.relationships:
        add(rel.source)
        add(rel.target)
    return list(seen.values())


class EntityResolver:
    def __init__(
        self,
        llm: LLMProvider | None = None,
        *,
        enable_llm: bool = True,
        timeout_sec: float = 10.0,
        fuzzy_threshold: float = FUZZY_MERGE_THRESHOLD,
        ambiguous_floor: float = AMBIGUOUS_FLOOR,
        prompt_version: str = RESOLUTION_PROMPT_VERSION,
    ) -> None:
        self.llm = llm
        self.enable_llm = enable_llm and llm is not None
        self.timeout_sec = timeout_sec
        self.fuzzy_threshold = fuzzy_threshold
        self.ambiguous_floor = ambiguous_floor
        self.prompt_version = prompt_version
        self._prompt: PromptTemplate | None = None
        #: the provider's name, recorded in the provenance of what it settled (ADR-0052)
        self.model_name: str | None = getattr(llm, "name", None) if self.enable_llm else None
        if self.enable_llm:
            self._prompt = load_prompt(prompt_version)  # fail fast on a missing prompt file

    def resolve_all(
        self,
        memory: AgentMemory,
        extraction: Extraction,
        speaker: str | None,
        message_text: str,
        memo: ResolutionMemo | None = None,
    ) -> ResolutionOutcome:
        """Resolve every name of ``extraction`` against ``memory``; keys are folded names."""
        memo = memo if memo is not None else ResolutionMemo()
        calls_before, errors_before = memo.llm_calls, len(memo.errors)
        pending: dict[str, str] = {}
        out: dict[str, Resolution] = {}
        for name, entity_type in names_of(extraction):
            res = resolve_name(
                memory,
                name,
                entity_type,
                speaker,
                fuzzy_threshold=self.fuzzy_threshold,
                ambiguous_floor=self.ambiguous_floor,
                pending=pending,
            )
            if res.kind == "ambiguous":
                res = self._settle_ambiguous(memory, res, speaker, message_text, memo)
            if res.kind == "new":
                pending[match_key(name)] = res.entity_key
            out[match_key(name)] = res
        return ResolutionOutcome(out, memo.llm_calls - calls_before, memo.errors[errors_before:])

    # ----- ambiguous band ----------------------------------------------------------------------

    def _settle_ambiguous(
        self,
        memory: AgentMemory,
        res: Resolution,
        speaker: str | None,
        message_text: str,
        memo: ResolutionMemo,
    ) -> Resolution:
        candidates = [key for key, _ in res.candidates if memory.has_entity(key)]
        candidates = list(dict.fromkeys(candidates))
        as_new = Resolution(res.name, res.entity_type, "new", res.entity_key, res.score)
        if not self.enable_llm or not candidates:
            return as_new
        memo_key = (match_key(res.name), tuple(candidates))
        if memo_key not in memo.answers:
            memo.answers[memo_key] = self._ask(memory, res, candidates, speaker, message_text, memo)
        chosen = memo.answers[memo_key]
        if chosen is None or not memory.has_entity(chosen):
            return as_new
        return Resolution(res.name, res.entity_type, "llm", chosen, res.score, res.candidates)

    def _ask(
        self,
        memory: AgentMemory,
        res: Resolution,
        candidates: list[str],
        speaker: str | None,
        message_text: str,
        memo: ResolutionMemo,
    ) -> str | None:
        assert self.llm is not None and self._prompt is not None
        scores = dict(res.candidates)
        lines = []
        for key in candidates:
            display, _etype = memory.entities[key]
            aliases = sorted({a for a, k in memory.aliases.items() if k == key} - {match_key(display)})[:5]
            lines.append(f"- {key}: {display}; {', '.join(aliases) or '-'}; {scores.get(key, 0.0):.2f}")
        system, user = self._prompt.render(
            {
                "speaker": speaker or "user (unknown name)",
                "message": message_text[:4000],
                "name": res.name,
                "entity_type": res.entity_type,
                "candidates": "\n".join(lines),
            }
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        llm = self.llm
        max_tokens = resolution_max_tokens(candidates)
        memo.llm_calls += 1
        try:
            raw = call_with_timeout(
                lambda: llm.complete(
                    messages,
                    temperature=0,
                    response_format=resolution_response_format(candidates),
                    max_tokens=max_tokens,
                ),
                self.timeout_sec,
                name="engramdb-llm-resolve",
            )
        except TimeoutError:
            memo.errors.append(f"resolution of {res.name!r} timed out after {self.timeout_sec:g}s; new entity")
            return None
        except Exception as exc:  # noqa: BLE001 — fail-safe: a new entity instead
            memo.errors.append(f"resolution of {res.name!r} failed ({type(exc).__name__}: {exc}); new entity")
            return None
        try:
            data = json.loads(str(raw).strip().removeprefix("```json").removesuffix("```"))
            match = data.get("match") if isinstance(data, dict) else None
        except (json.JSONDecodeError, AttributeError):
            memo.errors.append(f"resolution of {res.name!r}: malformed JSON from LLM; new entity")
            return None
        if match is None:
            return None
        if match not in candidates:
            memo.errors.append(f"resolution of {res.name!r}: LLM named non-candidate {match!r}; new entity")
            return None
        return str(match)
