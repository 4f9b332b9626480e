"""Merge & rank (docs/spec.md §3.3): one score per candidate, explained in ``scores``.

``score = relevance·(w_sem + w_rec·recency) + w_imp·importance + pattern`` where
``relevance = 1 − (1 − semantic)·Π(1 − w_s·signal_s)`` fuses the semantic score with the
keyword, graph, spreading and aggregation signals (noisy-OR, ADR 0006): each signal can only
raise relevance, a fact found by several signals ranks above one found by one, and with
only the semantic signal the formula has the spec's weights. Recency *scales* relevance
(a fresh fact counts up to (0.70+0.20)/0.70 ≈ 1.29× an old one of equal relevance) instead
of being added to it: added, it let any fact of the last few weeks outrank a relevant
older one, and LoCoMo Recall@10 fell from 62 to 42 (ADR 0006). Pure functions, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals import FactCandidate, decay, floored_decay

FUSED = ("keyword", "graph", "spreading", "aggregation")


def calibrated(cosine: float | None, floor: float, cfg: RetrieveConfig) -> float:
    """Cosine rescaled so the model's noise floor is 0; below ``min_similarity`` it is noise."""
    if cosine is None or floor >= 1.0:
        return 0.0
    value = max(0.0, (cosine - floor) / (1.0 - floor))
    return min(1.0, value) if value >= cfg.filters.min_similarity else 0.0


def fuse(semantic: float, signals: dict[str, float], cfg: RetrieveConfig) -> float:
    miss = 1.0 - semantic
    for key in FUSED:
        value = signals.get(key, 0.0)
        if value > 0.0:
            miss *= 1.0 - min(1.0, cfg.signal_weight(key) * value)
    return max(0.0, min(1.0, 1.0 - miss))


def pattern_boost(reinforcement_count: int, cfg: RetrieveConfig) -> float:
    """Up to ``pattern_boost_max`` (+0.10) for often-confirmed facts: 1 NOOP ≈ +0.03,
    3 ≈ +0.06, 10 ≈ +0.10."""
    if reinforcement_count <= 0:
        return 0.0
    return cfg.scoring.pattern_boost_max * (1.0 - math.exp(-reinforcement_count / 3.0))


def effective_confidence(confidence: float, anchor: datetime, when: datetime | None, cfg: RetrieveConfig) -> float:
    """Confidence decays slowly with age, never below ``confidence_decay_floor`` of itself."""
    share = cfg.scoring.confidence_decay_floor + (1.0 - cfg.scoring.confidence_decay_floor) * decay(
        anchor, when, cfg.scoring.confidence_half_life_days
    )
    return confidence * share


@dataclass
class Candidate:
    row: FactCandidate
    signals: dict[str, float] = field(default_factory=dict)  # keyword, graph, spreading, aggregation
    structural_graph: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    formula: float = 0.0
    relevance: float = 0.0
    final: float = 0.0

    @property
    def fact_id(self) -> str:
        return self.row.fact_id


def score_candidate(cand: Candidate, cfg: RetrieveConfig, floor: float, anchor: datetime) -> None:
    row = cand.row
    semantic = calibrated(row.cosine, floor, cfg)
    recency = decay(anchor, row.valid_from, cfg.scoring.recency_half_life_days)
    if cand.structural_graph > 0.0:
        cand.signals["graph"] = min(1.0, cand.structural_graph * floored_decay(anchor, row.valid_from, cfg.scoring.recency_half_life_days))
    relevance = fuse(semantic, cand.signals, cfg)
    pattern = pattern_boost(row.reinforcement_count, cfg)
    formula = (
        relevance * (cfg.weight("semantic") + cfg.weight("recency") * recency)
        + cfg.weight("importance") * row.importance
        + pattern
    )
    formula = max(0.0, min(1.0, formula))
    cand.relevance = relevance
    cand.formula = formula
    cand.final = formula
    cand.scores = {
        "semantic": round(semantic, 6),
        "cosine": round(row.cosine, 6) if row.cosine is not None else 0.0,
        "keyword": round(cand.signals.get("keyword", 0.0), 6),
        "graph": round(cand.signals.get("graph", 0.0), 6),
        "spreading": round(cand.signals.get("spreading", 0.0), 6),
        "aggregation": round(cand.signals.get("aggregation", 0.0), 6),
        "relevance": round(relevance, 6),
        "recency": round(recency, 6),
        "importance": round(row.importance, 6),
        "confidence": round(effective_confidence(row.confidence, anchor, row.valid_from, cfg), 6),
        "pattern": round(pattern, 6),
        "formula": round(formula, 6),
    }


def order_key(c: Candidate) -> tuple[float, str]:
    """Score descending, then fact id: the stable tie-break that makes results repeatable."""
    return (-round(c.final, 9), c.fact_id)


def rank(cands: list[Candidate], cfg: RetrieveConfig, floor: float, anchor: datetime) -> tuple[list[Candidate], int]:
    """Score every candidate, drop those whose decayed confidence is under ``min_confidence``;
    returns (ranked, dropped_by_confidence)."""
    kept: list[Candidate] = []
    dropped = 0
    for cand in cands:
        score_candidate(cand, cfg, floor, anchor)
        if cand.scores["confidence"] < cfg.filters.min_confidence:
            dropped += 1
            continue
        kept.append(cand)
    kept.sort(key=order_key)
    return kept, dropped


@dataclass
class EventCandidate:
    message_id: str
    text: str
    occurred_at: datetime
    speaker: str | None
    session_id: str | None
    cosine: float | None
    keyword: float
    scores: dict[str, float] = field(default_factory=dict)
    formula: float = 0.0
    final: float = 0.0


def score_event(ev: EventCandidate, cfg: RetrieveConfig, floor: float, anchor: datetime) -> None:
    """Messages go through the same formula as facts (importance neutral 0.5), so a turn and
    a fact with the same relevance and age score the same."""
    semantic = calibrated(ev.cosine, floor, cfg)
    relevance = fuse(semantic, {"keyword": ev.keyword}, cfg)
    recency = decay(anchor, ev.occurred_at, cfg.scoring.recency_half_life_days)
    formula = (
        relevance * (cfg.weight("semantic") + cfg.weight("recency") * recency)
        + cfg.weight("importance") * 0.5
    )
    ev.formula = ev.final = max(0.0, min(1.0, formula))
    ev.scores = {
        "semantic": round(semantic, 6),
        "keyword": round(ev.keyword, 6),
        "relevance": round(relevance, 6),
        "recency": round(recency, 6),
        "formula": round(ev.formula, 6),
    }


def rank_events(rows: list[tuple[Any, ...]], signals: dict[str, dict[str, float]], cfg: RetrieveConfig,
                floor: float, anchor: datetime) -> list[EventCandidate]:
    out: list[EventCandidate] = []
    for mid, text, occurred_at, speaker, session_id, cosine in rows:
        ev = EventCandidate(mid, text, occurred_at, speaker, session_id,
                            None if cosine is None else float(cosine), signals.get(mid, {}).get("keyword", 0.0))
        score_event(ev, cfg, floor, anchor)
        # a turn another list ranks (the subject sweep, ADR-0025; the tail lists, ADR-0037) stays
        # a candidate even below the similarity threshold: that list ranks, fusion decides
        listed = signals.get(mid, {})
        if ev.scores["relevance"] > 0.0 or listed.get("subject", 0.0) > 0.0 or listed.get("listed", 0.0) > 0.0:
            out.append(ev)
    out.sort(key=lambda e: (-round(e.final, 9), e.message_id))
    return out
