"""An extractor that plays back LoCoMo's own per-session ``observation`` facts.

Why: it separates *retrieval* quality from *extraction* quality. With the dataset's
human-curated facts as the extractor output, the benchmark measures how well engramdb's
write pipeline (resolution, reconciliation, projections) and retrieve rank what was said,
without an LLM in the loop and without the rule-based fallback's noise.

Honesty rules: the extractor is built from observations only (never the questions, which
it cannot reach); it is deterministic; and it emits an observation at the message that
completes its citations — the *last* cited turn in conversation order — so a fact never
appears before all the turns it rests on were written. It says so in
``info.extractor = "observations"``, which the write pipeline records as provenance.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from bench.locomo.data import Observation
from engramdb.domain.extraction import (
    ConfidenceLevel,
    ExtractedEntity,
    ExtractedFact,
    Extraction,
    ExtractionInput,
    ExtractorInfo,
)
from engramdb.services.extraction import ExtractionOutcome


def _turn_order(dia_id: str) -> tuple[int, int]:
    session, _, turn = dia_id.removeprefix("D").partition(":")
    try:
        return int(session), int(turn)
    except ValueError:
        return (1 << 30, 0)


class ObservationExtractor:
    """Implements the ``Extractor`` protocol of ``services.extraction``.

    ``observations_by_agent`` maps an agent id to that agent's (one conversation's)
    observations; a message of an unknown agent, or citing no observation, yields an
    empty extraction — not an error, since most turns state no new fact.
    """

    info = ExtractorInfo(extractor="observations", model=None, prompt_version="locomo-observation")

    def __init__(self, observations_by_agent: Mapping[str, Iterable[Observation]]) -> None:
        self._by_agent: dict[str, dict[str, list[Observation]]] = {}
        self._people: dict[str, list[str]] = {}
        for agent_id, observations in observations_by_agent.items():
            at: dict[str, list[Observation]] = {}
            observations = list(observations)
            self._people[agent_id] = sorted({o.speaker for o in observations})
            for obs in observations:
                anchor = max(obs.dia_ids, key=_turn_order)
                at.setdefault(anchor, []).append(obs)
            self._by_agent[agent_id] = at
        self.calls = 0

    def observations_at(self, agent_id: str, message_id: str) -> Sequence[Observation]:
        return self._by_agent.get(agent_id, {}).get(message_id, [])

    def extract(self, request: ExtractionInput) -> ExtractionOutcome:
        start = time.perf_counter()
        self.calls += 1
        observations = self.observations_at(request.agent_id, request.message_id)
        observations = list(observations)[: max(0, request.max_facts)]
        people = self._people.get(request.agent_id, [])
        facts = [
            ExtractedFact(
                text=obs.text,
                action="NEW",
                entity=obs.speaker,
                mentions=[n for n in people if n != obs.speaker and n in obs.text],
                category="observation",
                confidence_level=ConfidenceLevel.explicit_statement,
                source_message_ids=list(obs.dia_ids),
            )
            for obs in observations
        ]
        extraction = Extraction(
            facts=facts,
            entities=[
                ExtractedEntity(name=name, entity_type="person")
                for name in sorted(
                    {f.entity for f in facts} | {m for f in facts for m in f.mentions}
                )
            ],
        )
        return ExtractionOutcome(
            extraction=extraction,
            llm_calls=0,
            error=None,
            raw_output=None,
            duration_ms=(time.perf_counter() - start) * 1000.0,
        )
