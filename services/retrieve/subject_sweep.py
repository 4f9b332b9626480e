"""The subject sweep: when a question is about one or two named people or things, their own
facts and turns ranked against the question *without their names* — one more pair of ranked
lists for rank fusion (``fact_subject``, ``message_subject``; ADR-0025).

Why: list questions about one person ("What activities has Melanie done with her family?",
"Which places has Tim been to?") have their evidence in turns that name the specific thing
("we went camping", "my trip to London"), not the question's words. In the query embedding
the person's name dominates: every short fact or turn of that person is about as near as the
evidence ("Tim is working on his studies" was the nearest fact to the places question), and
BM25 matches the name in every turn they said. Restricting to the subject turns the name
into a filter; the rest of the question ("which places has they been to?", embedded once
more) then ranks the subject's facts and turns by what they say.

Pure parts (who the subject is, the name-less question, the list-question gate, the
per-session cap) are functions here; ``sweep`` is the only I/O: two statements on the
request's connection.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engramdb.domain.keys import match_key
from engramdb.services.retrieve.fusion import EVENT, FACT
from engramdb.services.retrieve.models import RetrievalPlan
from engramdb.services.retrieve.planner import PlannerLookup, QueryAnalysis, build_plan
from engramdb.services.retrieve.signals.messages import message_rows
from engramdb.services.retrieve.signals.shared import (
    Narrowing,
    agent_test,
    batch,
    exact_turns_when_few,
    exact_when_selective,
    fact_scope_split,
    message_visibility,
    narrowing_params,
    nearest_cte,
    set_hnsw,
)
from engramdb.services.retrieve.stages import RetrieveCall

MAX_SUBJECTS = 2  # "What do Jon and Gina both like?" sweeps both; three or more: not about one subject

# Questions asking for a list or a count (EN + PT): a plural noun right after what/which
# (before the verb), "how many", "what kinds of", "what has X done", "both", "in common".
_AUX = r"(?:has|have|had|does|do|did|is|are|was|were|can|could|would|will|tem|teve|fez|sao|foram|e)"
_LIST_CUES = [
    re.compile(p)
    for p in (
        r"^(?:what|which)\s+(?:\w+[\s/-]+){0,3}?\w{3,}s\s+" + _AUX + r"\b",
        r"\bhow many\b",
        r"\b(?:kinds?|types?|sorts?) of\b",
        r"^what (?:has|have)\b",
        r"\bboth\b",
        r"\bin common\b",
        r"\b(?:quais|quantos|quantas|que tipos? de|ambos|ambas|em comum)\b",
    )
]


def is_list_question(query: str) -> bool:
    """A question that asks for several things (or how many) rather than one."""
    folded = " ".join(re.findall(r"[\w'/-]+", match_key(query)))
    return any(p.search(folded) for p in _LIST_CUES)


@dataclass(frozen=True)
class Subject:
    """Who the question is about: entity keys, the names that may be a turn's speaker, and
    the question with those names replaced by a pronoun."""

    entity_keys: tuple[str, ...]
    speakers: tuple[str, ...]  # folded display names / matched aliases
    stripped_query: str
    # each named person on their own: (entity key, their folded names), in query order
    people: tuple[tuple[str, tuple[str, ...]], ...] = ()


def without_names(query: str, names: Sequence[str]) -> str:
    """The question with each name (and its possessive) replaced by "they" / "their":
    a pronoun keeps the sentence's shape, which the embedding reads better than a gap."""
    out = query
    for name in sorted({n for n in names if n.strip()}, key=len, reverse=True):
        pattern = re.escape(name).replace(r"\ ", r"\s+")
        out = re.sub(rf"\b{pattern}(?:'s|’s|')(?=\W|$)", "their", out, flags=re.IGNORECASE)
        out = re.sub(rf"\b{pattern}\b", "they", out, flags=re.IGNORECASE)
    return " ".join(out.split())


_PAIR = re.compile(r"\b(they|their)\s*(?:,\s*)?(?:and|&|e)\s+(they|their)\b", re.IGNORECASE)


def one_pronoun(stripped: str) -> str:
    """"they and they" → "they", "they and their" → "their": two named people asked about
    together read as one plural subject ("What movies have both they and they seen?" →
    "What movies have both they seen?"), which the embedding reads as a normal sentence."""
    return _PAIR.sub(lambda m: "their" if "their" in (m.group(1).lower(), m.group(2).lower()) else "they",
                     stripped)


def subject_of(query: str, plan: RetrievalPlan, scope: str, pair_as_one: bool = False) -> Subject | None:
    """The named entities of the plan (found in the query itself, not by expansion), when
    there are one or two and — for ``scope="list"`` — the question asks for a list.
    ``pair_as_one``: two names joined by "and" become one pronoun (``one_pronoun``)."""
    named = [e for e in plan.entities if e.source == "deterministic" and e.in_query]
    if not named or len(named) > MAX_SUBJECTS:
        return None
    if scope == "list" and not is_list_question(query):
        return None
    names = [n for e in named for n in (e.display_name, e.matched)]
    stripped = without_names(query, names)
    if pair_as_one:
        stripped = one_pronoun(stripped)
    if not stripped or match_key(stripped) == match_key(query):
        return None
    people: dict[str, set[str]] = {}
    for e in named:
        people.setdefault(e.entity_key, set()).update(match_key(n) for n in (e.display_name, e.matched) if n)
    return Subject(
        entity_keys=tuple(sorted({e.entity_key for e in named})),
        speakers=tuple(sorted({match_key(n) for n in names if n})),
        stripped_query=stripped,
        people=tuple((key, tuple(sorted(folded))) for key, folded in people.items()),
    )


def cap_per_group(ranked: Sequence[tuple[str, Any]], per_group: int) -> list[str]:
    """Ids best first, at most ``per_group`` of each group (a session, a day); 0 = no cap."""
    if per_group <= 0:
        return [i for i, _ in ranked]
    seen: dict[Any, int] = {}
    out: list[str] = []
    for unit_id, group in ranked:
        n = seen.get(group, 0)
        if n < per_group:
            out.append(unit_id)
        seen[group] = n + 1
    return out


def interleave(lists: Sequence[Sequence[str]]) -> list[str]:
    """First of each list, then the second of each, …; an id already taken is skipped."""
    out: list[str] = []
    seen: set[str] = set()
    for i in range(max((len(x) for x in lists), default=0)):
        for ids in lists:
            if i < len(ids) and ids[i] not in seen:
                seen.add(ids[i])
                out.append(ids[i])
    return out


Started = tuple["Subject", Future[tuple[str, float]]]


@dataclass
class SweepOut:
    fact_ids: list[str] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)


_DAY = ", (f.valid_from AT TIME ZONE 'UTC')::date::text AS day"
_SESSION = ", m.session_id AS session_id"


def sweep(
    conn: Any,
    agent_id: str,
    subject: Subject,
    qvec: str,
    *,
    as_of: datetime | None,
    min_confidence: float,
    limit: int,
    ef_search: int,
    per_session: int = 0,
    exact_rows: int = 0,
    small: tuple[bool | None, bool | None] = (None, None),
    only_subject: bool = True,
    scope: Narrowing | None = None,
    facts: bool = True,
    turns: bool = True,
) -> SweepOut:
    """The subject's facts (by entity) and turns (by speaker), nearest to ``qvec`` (the
    name-less question's vector) first, at most ``per_session`` per session (facts: per day
    they became valid). No similarity threshold: the sweep ranks, fusion decides. Without
    ``facts`` no facts: they are read with the semantic search (``facts_merged``); without
    ``turns`` no turns: they are read with the turn lists (``turns_merged``)."""
    fetch = fetch_for(limit, per_session)
    visible, late, late_cols = fact_scope_split(as_of, scope)
    facts_where = f"{visible} AND f.confidence >= %(minc)s"
    msgs_where = message_visibility(as_of, scope=scope)
    small = (exact_when_selective(small[0], scope), exact_turns_when_few(small[1], scope))
    # the subject's facts are found by the agent's (agent_id, entity_key) index: keep it usable
    agent = None if only_subject else agent_test("f", scope)
    if only_subject:
        facts_where += " AND f.entity_key = ANY(%(keys)s)"
        msgs_where += " AND lower(m.speaker) = ANY(%(speakers)s)"
    params = {"q": qvec, "a": agent_id, "t": as_of, "minc": min_confidence, "n": fetch,
              "keys": list(subject.entity_keys), "speakers": list(subject.speakers),
              **narrowing_params(scope)}
    with batch(conn):
        set_hnsw(conn, max(ef_search, fetch))
        found = None if not facts else conn.execute(
            # the day as text: a grouping key only, and a year-10000 edge date (an older
            # release's poisoned row) would not load as a Python date; read with the nearest
            # rows themselves, not by a second lookup (ADR-0038)
            f"WITH {nearest_cte('mem_facts', 'f', 'fact_id', facts_where, exact_rows, small[0], _DAY, late, late_cols, agent)}"
            " SELECT nn.fact_id, nn.day FROM nn ORDER BY nn.d, nn.fact_id",
            params,
        )
        msgs = None if not turns else conn.execute(
            f"WITH {nearest_cte('mem_messages', 'm', 'message_id', msgs_where, exact_rows, small[1], _SESSION)}"
            " SELECT nn.message_id, nn.session_id FROM nn ORDER BY nn.d, nn.message_id",
            params,
        )
    fact_rows = [] if found is None else found.fetchall()
    msg_rows = [] if msgs is None else msgs.fetchall()
    return SweepOut(
        fact_ids=cap_per_group([(r[0], r[1]) for r in fact_rows], per_session)[:limit],
        message_ids=cap_per_group([(r[0], r[1]) for r in msg_rows], per_session)[:limit],
    )


def sweep_people(
    conn: Any,
    agent_id: str,
    subject: Subject,
    qvec: str,
    *,
    as_of: datetime | None,
    min_confidence: float,
    limit: int,
    ef_search: int,
    exact_rows: int = 0,
    small: tuple[bool | None, bool | None] = (None, None),
    scope: Narrowing | None = None,
) -> SweepOut:
    """Each named person's own facts and turns, nearest to the name-less question, the
    persons' lists interleaved (``fact_person`` / ``message_person``). Why: a question about
    two people ("What movies have both Joanna and Nate seen?") needs evidence from each, and
    one ranking over both (or over everyone) fills with whoever says more about the topic;
    one list per person, taken in turn, gives each the same share of the top ranks."""
    per = [
        sweep(conn, agent_id, Subject((key,), names, subject.stripped_query), qvec, as_of=as_of,
              min_confidence=min_confidence, limit=limit, ef_search=ef_search, exact_rows=exact_rows,
              small=small, only_subject=True, scope=scope)
        for key, names in subject.people
    ]
    return SweepOut(
        fact_ids=interleave([p.fact_ids for p in per])[:limit],
        message_ids=interleave([p.message_ids for p in per])[:limit],
    )


# ----- the pipeline's two calls ---------------------------------------------------------


SWEEP_LISTS = ("fact_subject", "message_subject")
PERSON_LISTS = ("fact_person", "message_person")


def enabled(weights: dict[str, float], names: Sequence[str] = SWEEP_LISTS + PERSON_LISTS) -> bool:
    return any(weights.get(name, 0.0) > 0.0 for name in names)


def named_plan(analysis: QueryAnalysis, names: dict[str, list[tuple[str, str]]]) -> RetrievalPlan:
    """The plan as far as the names in the question decide it: its named (``deterministic``,
    ``in_query``) entities are the full plan's — ``build_plan`` resolves them from the names
    alone, before any expansion — which is all ``subject_of`` reads."""
    return build_plan(analysis, PlannerLookup(names=names))


def start(
    call: RetrieveCall, names: dict[str, list[tuple[str, str]]], embed: Callable[[str], Future[tuple[str, float]]]
) -> Started | None:
    """Right after the planner's name lookup (``planner.load_names``), before the rest of the
    plan: the subject, and its name-less question's embedding started on the second
    embedding thread, beside the question's own (ADR-0031; before, it started after the whole
    plan and, with one engine handle, ran after the question's embedding)."""
    if call.cfg.scoring.ranking != "rrf" or not enabled(call.cfg.fusion.rrf_weights):
        return None
    subject = subject_of(call.query, named_plan(call.analysis, names), call.cfg.sweeps.subject_sweep_scope,
                         call.cfg.sweeps.subject_sweep_pair_as_one)
    call.trace.note(subject_sweep=None if subject is None else {
        "entities": list(subject.entity_keys), "query": subject.stripped_query})
    if subject is None:
        return None
    call.subject_speakers = subject.speakers
    return subject, embed(subject.stripped_query)


@dataclass
class Swept:
    """What ``run`` found, for ``apply`` to hand to the pipeline (``run`` may run on a database
    worker: it never touches the call, so the request thread stays its only writer)."""

    out: SweepOut = field(default_factory=SweepOut)
    people: SweepOut = field(default_factory=SweepOut)
    rows: list[tuple[Any, ...]] = field(default_factory=list)  # the swept turns' rows
    embed_ms: float | None = None  # the name-less question's embedding, when it arrived
    stage_ms: float | None = None  # the statements, when they ran
    error: str | None = None  # the embedding's failure (fail-safe: no sweep)


def fetch_for(limit: int, per_session: int) -> int:
    """How many nearest rows a sweep reads for ``limit`` kept at ``per_session`` a group."""
    return limit * 3 if per_session > 0 else limit


def run(call: RetrieveCall, conn: Any, started: Started, query_vector: Callable[[], str | None],
        exact_rows: int, facts: bool = True, turns: bool = True) -> Swept:
    """The sweep's statements, once the name-less question's vector is there: the subject's
    and the named persons' facts and turns, and the swept turns' rows (cosine to the whole
    question, ``query_vector()``). Reads the call, never writes it.

    Why the question's vector is asked for only before the rows: the name-less question is
    shorter, so its vector usually arrives first (at 100k facts ≈ 25 vs 32 ms); the sweeps'
    statements need only it and run while the question is still being embedded — asked for
    up front, they waited for both and sat on the call's critical path (ADR-0042)."""
    subject, f_vec = started
    try:
        vec, embed_ms = f_vec.result()
    except Exception as exc:  # fail-safe: no sweep, the other lists still answer
        return Swept(error=f"{type(exc).__name__}: {str(exc)[:200]}")
    cfg = call.cfg
    begin = time.perf_counter()
    out, people = SweepOut(), SweepOut()
    if enabled(cfg.fusion.rrf_weights, SWEEP_LISTS):
        out = sweep(conn, call.agent_id, subject, vec, as_of=call.as_of, min_confidence=cfg.filters.min_confidence,
                    limit=cfg.candidates.candidate_pool, ef_search=cfg.candidates.hnsw_ef_search,
                    per_session=cfg.sweeps.subject_sweep_per_session, exact_rows=exact_rows,
                    small=_small(call), only_subject=cfg.sweeps.subject_sweep_only_subject, scope=call.scope,
                    facts=facts, turns=turns)
    if enabled(cfg.fusion.rrf_weights, PERSON_LISTS) and (
            cfg.sweeps.person_sweep_scope == "any" or is_list_question(call.query)):
        people = sweep_people(conn, call.agent_id, subject, vec, as_of=call.as_of,
                              min_confidence=cfg.filters.min_confidence, limit=cfg.candidates.candidate_pool,
                              ef_search=cfg.candidates.hnsw_ef_search, exact_rows=exact_rows, small=_small(call),
                              scope=call.scope)
    message_ids = list(dict.fromkeys(out.message_ids + people.message_ids))
    rows = message_rows(conn, call.agent_id, message_ids, query_vector(), call.scope)
    return Swept(out, people, rows, embed_ms, (time.perf_counter() - begin) * 1000.0)


def _small(call: RetrieveCall) -> tuple[bool | None, bool | None]:
    return call.small.get("mem_facts"), call.small.get("mem_messages")


def apply(call: RetrieveCall, swept: Swept) -> list[str]:
    """Hand ``run``'s result to the call: ``call.lists`` (``fact_subject``,
    ``message_subject``, ``fact_person``, ``message_person``), ``call.subject_rows`` and the
    trace; returns the swept fact ids (to hydrate as candidates)."""
    if swept.embed_ms is not None:
        call.trace.timings["embed_subject"] = swept.embed_ms
    if swept.error is not None:
        call.trace.note(subject_sweep_error=swept.error)
        return []
    if swept.stage_ms is not None:
        call.trace.timings["subject_sweep"] = swept.stage_ms
    out, people = swept.out, swept.people
    call.subject_rows = swept.rows
    call.lists["fact_subject"] = (FACT, out.fact_ids)
    call.lists["message_subject"] = (EVENT, out.message_ids)
    call.lists["fact_person"] = (FACT, people.fact_ids)
    call.lists["message_person"] = (EVENT, people.message_ids)
    call.trace.count(subject_facts=len(out.fact_ids), subject_messages=len(out.message_ids),
                     person_facts=len(people.fact_ids), person_messages=len(people.message_ids))
    return list(dict.fromkeys(out.fact_ids + people.fact_ids))


def finish(call: RetrieveCall, conn: Any, started: Started | None, qvec: str | None, exact_rows: int) -> list[str]:
    """``run`` then ``apply`` on the request's connection (no database workers)."""
    if started is None:
        return []
    return apply(call, run(call, conn, started, lambda: qvec, exact_rows))
