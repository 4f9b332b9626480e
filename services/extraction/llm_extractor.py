"""The LLM extractor: one JSON-schema-constrained chat call per message (docs/spec.md §2 step 3).

Why it is built this way:

* **Informed extraction** — the prompt shows the known entities and the known facts *with
  their ids*, so the model can say "this UPDATEs fact X" instead of producing a duplicate.
  The context is capped at ~800 tokens (docs/spec.md: ``context budget 800 tokens``).
* **Strict JSON schema** — derived from the :class:`~domain.extraction.Extraction` model
  and post-processed for OpenAI strict mode (every property required, nullable instead of
  optional, ``additionalProperties: false``, no unsupported keywords).
* **Fail-safe** — the provider call runs in a daemon worker thread and is abandoned after
  ``timeout_sec`` even if the provider ignores its own timeout; errors and malformed JSON
  give an empty extraction plus an error text; an outage (timeout, unreachable, 429, 5xx)
  is flagged ``transient`` so the pipeline defers instead (ADR-0014). Invalid facts are
  dropped one by one, so a single bad item does not cost the whole message.
* **Versioned prompt** — the prompt lives in ``infra/prompts/<name>_<version>.md`` and its
  version string is reported in :attr:`LLMExtractor.info` for provenance. ``extraction/v3``
  (default, issue 26) adds the message's emotion and the speaker's directives to the one
  call and keeps facts in the message's own words; v2 (retraction requests, compound
  sentences, self-introductions) and v1 stay loadable.
* **Post-processed** (``llm_postprocess``): what a small model gets wrong in ways that lose
  facts — free attribute keys, UPDATEs of unrelated facts, first person — is repaired after
  parsing, so a replayed answer benefits from a fix without a new call.
* **Bounded output** — every call passes ``max_tokens`` sized from the schema and the
  message's fact cap (``services/extraction/llm_budget.py``); the prompt states the same cap. An
  answer cut at the bound (or at the server's context window) keeps the items it finished
  (``json_salvage``, at most the fact cap), with the error and the partial raw output
  recorded with the message; with nothing finished it is an empty extraction.
"""

from __future__ import annotations

import copy
import json
import re
import time
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ValidationError

from engramdb.domain.directives import ExtractedDirective
from engramdb.domain.extraction import (
    ExtractedEntity,
    ExtractedFact,
    ExtractedRelationship,
    Extraction,
    ExtractionInput,
    ExtractorInfo,
)
from engramdb.domain.ports import LLMProvider
from engramdb.domain.text import approx_tokens
from engramdb.infra.llm_timeout import call_with_timeout
from engramdb.infra.prompt_files import PromptTemplate
from engramdb.infra.prompt_files import load_prompt as _load_prompt
from engramdb.infra.providers.errors import is_transient
from engramdb.services.extraction.json_salvage import salvage_prefix
from engramdb.services.extraction.llm_budget import extraction_fact_cap, extraction_max_tokens
from engramdb.services.extraction.llm_postprocess import parse_emotion, postprocess
from engramdb.services.extraction.port import ExtractionOutcome

DEFAULT_PROMPT_VERSION = "extraction/v3"
CONTEXT_TOKEN_BUDGET = 800
SCHEMA_NAME = "engramdb_extraction"

# Fields of the domain models the LLM must not fill in (the pipeline sets them).
_EXCLUDED_FIELDS = {"source_message_ids", "detector"}
# Keywords OpenAI strict mode rejects or that only add noise to the schema.
_DROPPED_KEYWORDS = {"title", "default", "minLength", "maxLength", "examples", "description"}

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


# --------------------------------------------------------------------------- prompt file


def load_prompt(version: str = DEFAULT_PROMPT_VERSION) -> PromptTemplate:
    """The extraction prompt (``infra/prompts/extraction_v3.md`` by default)."""
    return _load_prompt(version)


# --------------------------------------------------------------------------- JSON schema


def _strictify(node: Any) -> Any:
    """Rewrite a pydantic JSON schema node in place into OpenAI strict-mode form."""
    if isinstance(node, list):
        return [_strictify(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYWORDS:
            continue
        if key == "properties":
            out[key] = {
                name: _strictify(sub) for name, sub in value.items() if name not in _EXCLUDED_FIELDS
            }
        else:
            out[key] = _strictify(value)
    if "properties" in out:
        out["type"] = "object"
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


@lru_cache(maxsize=1)
def _cached_schema() -> str:
    return json.dumps(_strictify(Extraction.model_json_schema()))


def extraction_json_schema() -> dict[str, Any]:
    """The strict JSON schema of :class:`Extraction` (a fresh copy on every call).

    Optional fields stay nullable (pydantic emits ``anyOf [.., null]``) but become
    required, as strict mode demands; ``source_message_ids`` is left out because the
    pipeline, not the model, knows message ids.
    """
    return copy.deepcopy(json.loads(_cached_schema()))


def response_format() -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "schema": extraction_json_schema(), "strict": True},
    }


# --------------------------------------------------------------------------- context


def build_context(
    request: ExtractionInput, budget_tokens: int = CONTEXT_TOKEN_BUDGET
) -> tuple[str, str]:
    """Known entities and known facts as prompt lines, within ``budget_tokens`` together.

    Entities come first (they are short and needed to name things consistently); facts
    follow in the order given (the pre-retrieval's relevance order). Lines that do not fit
    are left out whole, never cut.
    """
    used = 0
    entity_lines: list[str] = []
    for ent in request.known_entities:
        aliases = ", ".join(a for a in ent.aliases if a != ent.display_name)
        line = f"- {ent.entity_key}: {ent.display_name}" + (f"; {aliases}" if aliases else "")
        cost = approx_tokens(line) + 1
        if used + cost > budget_tokens:
            break
        entity_lines.append(line)
        used += cost
    fact_lines: list[str] = []
    for fact in request.known_facts:
        attr = f"; {fact.attribute_key}" if fact.attribute_key else ""
        line = f"- [{fact.fact_id}] ({fact.entity_key}{attr}) {fact.text}"
        cost = approx_tokens(line) + 1
        if used + cost > budget_tokens:
            break
        fact_lines.append(line)
        used += cost
    return ("\n".join(entity_lines) or "(none)", "\n".join(fact_lines) or "(none)")


def build_messages(request: ExtractionInput, prompt: PromptTemplate) -> list[dict[str, Any]]:
    entities, facts = build_context(request)
    system, user = prompt.render(
        {
            "speaker": request.speaker or "user (unknown name)",
            "date": request.occurred_at.isoformat(),
            "known_entities": entities,
            "known_facts": facts,
            "message": request.text,
            "max_facts": str(extraction_fact_cap(request.text, request.max_facts)),
        }
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# --------------------------------------------------------------------------- parsing


def _strip_nulls(item: Any, model: type[BaseModel]) -> Any:
    """Drop ``null`` values of fields whose default is not ``None`` so defaults apply.

    Strict mode makes every field required, and models sometimes answer ``null`` for a
    list or category; that is a missing value, not an invalid fact.
    """
    if not isinstance(item, dict):
        return item
    cleaned = {}
    for key, value in item.items():
        info = model.model_fields.get(key)
        if (
            value is None
            and info is not None
            and not info.is_required()
            and info.default is not None
        ):
            continue
        cleaned[key] = value
    return cleaned


def parse_extraction(raw: str, max_facts: int) -> tuple[Extraction, list[str]]:
    """Validate the model's JSON item by item. Raises ``ValueError`` if it is not JSON at all."""
    text = raw.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed JSON from LLM: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"LLM JSON is a {type(data).__name__}, expected an object")

    problems: list[str] = []

    def items(key: str, model: type[BaseModel]) -> list[Any]:
        value = data.get(key, [])
        if value is None:
            return []
        if not isinstance(value, list):
            problems.append(f"'{key}' is not a list")
            return []
        valid = []
        for index, item in enumerate(value):
            try:
                valid.append(model.model_validate(_strip_nulls(item, model)))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "item"
                problems.append(f"dropped {key}[{index}]: {where}: {first['msg']}")
        return valid

    facts = items("facts", ExtractedFact)
    entities = items("entities", ExtractedEntity)
    relationships = items("relationships", ExtractedRelationship)
    directives = items("directives", ExtractedDirective)
    emotion = parse_emotion(data.get("emotion"), problems)
    if len(facts) > max_facts:
        problems.append(f"capped {len(facts)} facts to max_facts={max_facts}")
        facts = facts[: max(max_facts, 0)]
    extraction = Extraction(
        emotion=emotion, facts=facts, entities=entities, relationships=relationships,
        directives=directives,
    )
    return extraction, problems


# --------------------------------------------------------------------------- extractor


class LLMExtractor:
    """Informed extraction with an :class:`~domain.ports.LLMProvider` (never raises)."""

    def __init__(
        self,
        llm: LLMProvider,
        timeout_sec: float = 30.0,
        prompt_version: str = DEFAULT_PROMPT_VERSION,
        repair: bool = True,
    ) -> None:
        self.llm = llm
        self.repair = repair  # llm_postprocess; off only to measure what it changes
        self.timeout_sec = timeout_sec
        self.prompt = load_prompt(prompt_version)  # fail fast on a missing prompt file
        self.info = ExtractorInfo(
            extractor="llm", model=getattr(llm, "name", None), prompt_version=prompt_version
        )

    def build_messages(self, request: ExtractionInput) -> list[dict[str, Any]]:
        return build_messages(request, self.prompt)

    def _salvage(
        self, cut: str, request: ExtractionInput
    ) -> tuple[Extraction, list[str]] | None:
        """The complete items of an answer cut off mid-way (a runaway model, ADR-0045), at
        most the message's fact cap of them; ``None`` when none was finished."""
        data = salvage_prefix(cut)
        if data is None:
            return None
        cap = extraction_fact_cap(request.text, request.max_facts)
        extraction, problems = parse_extraction(json.dumps(data), cap)
        if self.repair:
            extraction = postprocess(extraction, request, problems)
        if not (extraction.facts or extraction.directives or extraction.emotion):
            return None
        problems.insert(0, f"kept {len(extraction.facts)} complete facts of the cut answer")
        return extraction, problems

    def extract(self, request: ExtractionInput) -> ExtractionOutcome:
        started = time.perf_counter()

        def done(
            extraction: Extraction | None,
            error: str | None,
            raw: str | None,
            calls: int,
            transient: bool = False,
        ) -> ExtractionOutcome:
            return ExtractionOutcome(
                extraction=extraction or Extraction(),
                llm_calls=calls,
                error=error,
                raw_output=raw,
                duration_ms=(time.perf_counter() - started) * 1000.0,
                transient=transient,
            )

        try:
            messages = self.build_messages(request)
            fmt = response_format()
            max_tokens = extraction_max_tokens(
                extraction_fact_cap(request.text, request.max_facts)
            )
        except Exception as exc:  # noqa: BLE001 — fail-safe: never crash the caller
            return done(None, f"prompt construction failed: {exc!r}", None, 0)

        try:
            raw = call_with_timeout(
                lambda: self.llm.complete(
                    messages, temperature=0, response_format=fmt, max_tokens=max_tokens
                ),
                self.timeout_sec,
                name="engramdb-llm-extract",
            )
        except TimeoutError:
            error = f"LLM call timed out after {self.timeout_sec:g}s"
            return done(None, error, None, 1, transient=True)
        except Exception as exc:  # noqa: BLE001
            # A provider that reports a truncated answer hands its partial text along
            # (``partial_output``): recorded, so no model output is lost.
            partial = getattr(exc, "partial_output", None)
            error = f"LLM call failed: {type(exc).__name__}: {exc}"
            raw_partial = partial if isinstance(partial, str) else None
            kept = self._salvage(raw_partial, request) if raw_partial else None
            if kept is not None:  # the facts finished before the cut (json_salvage)
                return done(kept[0], "; ".join([error, *kept[1]]), raw_partial, 1)
            return done(None, error, raw_partial, 1, transient=is_transient(exc))

        if not isinstance(raw, str):
            return done(None, f"LLM returned {type(raw).__name__}, expected str", None, 1)
        try:
            extraction, problems = parse_extraction(raw, request.max_facts)
            if self.repair:
                extraction = postprocess(extraction, request, problems)
        except ValueError as exc:
            if approx_tokens(raw) >= max_tokens * 0.9:
                exc = ValueError(f"{exc} (output probably cut at max_tokens={max_tokens})")
                kept = self._salvage(raw, request)
                if kept is not None:
                    return done(kept[0], "; ".join([str(exc), *kept[1]]), raw, 1)
            return done(None, str(exc), raw, 1)
        except Exception as exc:  # noqa: BLE001
            return done(None, f"LLM output rejected: {exc!r}", raw, 1)
        return done(extraction, "; ".join(problems) or None, raw, 1)
