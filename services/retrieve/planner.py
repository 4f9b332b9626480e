"""Deterministic planner (docs/spec.md §3.1): no LLM, same query + same memory ⇒ same plan.

Split in three so the decisions are pure and testable without a database:
``analyze_query`` (pure: greeting / aggregation / broad detection, n-grams),
``load_lookup`` (the only I/O: the agent's aliases, names, slugs, type prefixes and 1-hop
neighbours that the n-grams can touch) and ``build_plan`` (pure: longest-match entity
resolution, expansion, pattern queries). A greeting never reaches ``load_lookup``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engramdb.domain.keys import match_key, slugify
from engramdb.domain.text import STOPWORDS_QUERY, WORD_RE, is_small_talk_query, ngram_spans
from engramdb.services.retrieve.models import PlannedEntity, PlanReason, RetrievalPlan

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# Aggregation: a plural type noun with a cue ("who are my friends?", "quais são meus amigos",
# "list all companies", "meus projetos"). Each noun maps to the entity-type prefixes it can mean.
_TYPE_NOUNS: dict[str, tuple[str, ...]] = {}
for _nouns, _prefixes in (
    ("friends people persons family relatives colleagues coworkers contacts kids children "
     "amigos amigas pessoas familia parentes colegas contatos filhos", ("person",)),
    ("companies organizations organisations orgs employers clients customers startups "
     "empresas organizacoes clientes", ("organization", "company", "org")),
    ("places cities countries locations lugares cidades paises locais", ("place", "location", "city", "country")),
    ("projects projetos", ("project",)),
    ("pets animals animais bichos", ("pet", "animal")),
    ("events eventos", ("event",)),
    ("books livros", ("book",)),
    ("products produtos tools ferramentas", ("product", "tool")),
    ("hobbies", ("hobby", "activity")),
):
    for _noun in _nouns.split():
        _TYPE_NOUNS[_noun] = _prefixes
_AGG_CUE = re.compile(
    r"\b(who are|who is in|list|liste|listar|lista|all|every|todos|todas|quais sao|quais|quem sao|"
    r"what are|which|how many|quantos|quantas|name)\b"
)
_POSSESSIVE = {"my", "our", "meus", "minhas", "nossos", "nossas", "his", "her", "their", "seus", "suas"}

_BROAD = [
    re.compile(p)
    for p in (
        r"\btell me (everything|all|all you know|what you know)\b",
        r"\beverything (you know |i told you |about|on|regarding)",
        r"\bwhat do you know about\b",
        r"\bsummari[sz]e (everything|all)\b",
        r"\b(me )?(conte|conta|diga|diz|fale|fala) (tudo|me tudo)\b",
        r"\btudo (o que (voce|vc) sabe )?(sobre|a respeito|de|do|da)\b",
        r"\bo que (voce|vc) sabe (sobre|de|do|da)\b",
    )
]


def sanitize_query(query: str, max_chars: int) -> str:
    """Strip NULs/control characters and lone surrogates, collapse whitespace, cap the
    length (at a word boundary when possible): a 100 kB paste must not become a 100 kB
    embedding input, and PostgreSQL text cannot hold U+0000."""
    text = (query or "").encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
    text = _CONTROL.sub(" ", unicodedata.normalize("NFC", text))
    text = " ".join(text.split())
    if len(text) > max_chars:
        cut = text[:max_chars]
        space = cut.rfind(" ")
        text = cut[:space] if space > max_chars // 2 else cut
    return text


@dataclass(frozen=True)
class QueryAnalysis:
    query: str
    folded: str
    tokens: tuple[str, ...]  # folded word tokens, in order
    greeting: bool
    broad: bool
    aggregation_prefixes: tuple[str, ...]  # candidate type prefixes, not yet checked
    ngrams: tuple[tuple[int, int, str], ...]  # (start, end, folded text), longest first


def analyze_query(query: str, max_ngram: int = 4) -> QueryAnalysis:
    """Pure: what kind of query this is, and the n-grams that may name entities."""
    folded = match_key(query)
    tokens = WORD_RE.findall(folded)
    greeting = is_small_talk_query(tokens)
    broad = any(p.search(folded) for p in _BROAD)
    prefixes: list[str] = []
    cue = bool(_AGG_CUE.search(folded))
    for i, tok in enumerate(tokens):
        if tok in _TYPE_NOUNS and (cue or (i > 0 and tokens[i - 1] in _POSSESSIVE)):
            for p in _TYPE_NOUNS[tok]:
                if p not in prefixes:
                    prefixes.append(p)
    ngrams: list[tuple[int, int, str]] = []
    for start, end in ngram_spans(len(tokens), max_ngram, longest_first=True):
        words = tokens[start:end]
        if all(w in STOPWORDS_QUERY or len(w) < 2 for w in words):
            continue
        if words[0] in STOPWORDS_QUERY or words[-1] in STOPWORDS_QUERY:
            continue  # "the vertix" is found as "vertix"
        ngrams.append((start, end, " ".join(words)))
    return QueryAnalysis(
        query=query,
        folded=folded,
        tokens=tuple(tokens),
        greeting=greeting,
        broad=broad,
        aggregation_prefixes=tuple(prefixes),
        ngrams=tuple(ngrams),
    )


@dataclass(frozen=True)
class Edge:
    """A relationship seen from ``seed``: ``seed`` — ``neighbour`` (direction ignored)."""

    seed: str
    neighbour: str
    relation_type: str
    strength: float
    last_seen_at: datetime | None


@dataclass
class PlannerLookup:
    """What the agent's memory says about the query's n-grams (input of ``build_plan``)."""

    # folded n-gram -> [(entity_key, display_name)] (aliases, display names, slugs)
    names: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    prefixes: set[str] = field(default_factory=set)  # existing entity-type prefixes (checked)
    edges: list[Edge] = field(default_factory=list)  # 1-hop relationships of matched entities
    display_names: dict[str, str] = field(default_factory=dict)  # neighbour key -> name
    # fellow members of the matched entities' communities (``community_expansion``, ADR-0022)
    communities: list[Edge] = field(default_factory=list)


def build_plan(
    analysis: QueryAnalysis, lookup: PlannerLookup | None, expansion_limit: int = 5
) -> RetrievalPlan:
    """Pure: the plan for an analysed query and what the agent's memory knows."""
    if not analysis.query:
        return RetrievalPlan(strategy="skip", similarity_query="", reason="empty")
    if analysis.greeting:
        return RetrievalPlan(strategy="skip", similarity_query=analysis.query, reason="greeting")
    lookup = lookup or PlannerLookup()
    # longest non-overlapping n-gram match wins ("marcos tavares" before "marcos")
    taken: list[tuple[int, int]] = []
    entities: dict[str, PlannedEntity] = {}
    for start, end, text in analysis.ngrams:
        hits = lookup.names.get(text)
        if not hits or any(s < end and start < e for s, e in taken):
            continue
        taken.append((start, end))
        for key, name in sorted(hits):
            if key not in entities:
                entities[key] = PlannedEntity(
                    entity_key=key, display_name=name, source="deterministic", matched=text, in_query=True
                )
    # expansion: 1-hop neighbours, strongest (then most recent, then key) first
    edges = sorted(
        (e for e in lookup.edges if e.seed in entities),
        key=lambda e: (-e.strength, -(e.last_seen_at.timestamp() if e.last_seen_at else 0.0), e.neighbour),
    )
    added = 0
    for edge in edges:
        if added >= expansion_limit:
            break
        if edge.neighbour in entities:
            continue
        entities[edge.neighbour] = PlannedEntity(
            entity_key=edge.neighbour,
            display_name=lookup.display_names.get(edge.neighbour, edge.neighbour.split(":", 1)[-1]),
            source="expansion",
            matched=edge.seed,
            in_query=False,
        )
        added += 1
    # then fellow community members (empty unless ``community_expansion``), same budget
    for edge in sorted(lookup.communities, key=lambda e: (e.seed, e.neighbour)):
        if added >= expansion_limit:
            break
        if edge.seed not in entities or edge.neighbour in entities:
            continue
        entities[edge.neighbour] = PlannedEntity(
            entity_key=edge.neighbour,
            display_name=lookup.display_names.get(edge.neighbour, edge.neighbour.split(":", 1)[-1]),
            source="expansion",
            matched=edge.seed,
            in_query=False,
        )
        added += 1
    patterns = [f"{p}:%" for p in analysis.aggregation_prefixes if p in lookup.prefixes]
    reason: PlanReason = "aggregation" if patterns else "broad" if analysis.broad else "deterministic"
    return RetrievalPlan(
        strategy="multi_signal",
        similarity_query=analysis.query,
        pattern_queries=patterns,
        broad_query=analysis.broad,
        reason=reason,
        entities=list(entities.values()),
    )


# ----- the only I/O of the planner ------------------------------------------------------


def load_names(conn: Any, agent_id: str, analysis: QueryAnalysis) -> dict[str, list[tuple[str, str]]]:
    """The agent's entities the query's n-grams name: folded n-gram -> [(entity_key,
    display_name)] (``PlannerLookup.names``). One primary-key lookup of the aliases (a scan
    of the agent's entities only when no alias matches).

    Apart from ``load_lookup`` because the names alone decide the plan's named entities:
    the subject sweep (ADR-0025) reads them before the rest of the plan, to start its
    second embedding beside the question's (ADR-0031)."""
    names: dict[str, list[tuple[str, str]]] = {}
    grams = sorted({text for _, _, text in analysis.ngrams})
    if grams:
        slugs = {slugify(g): g for g in grams}
        params = {"a": agent_id, "grams": grams, "slugs": list(slugs)}
        rows = conn.execute(  # aliases (display names are aliases too): primary-key lookups
            """
            SELECT a.alias_folded, coalesce(e.merged_into, a.entity_key), coalesce(e.display_name, a.alias)
              FROM mem_aliases a
              LEFT JOIN mem_entities e ON e.agent_id = a.agent_id AND e.entity_key = a.entity_key
             WHERE a.agent_id = %(a)s AND a.alias_folded = ANY(%(grams)s)
            """,
            params,
        ).fetchall()
        if not rows:  # names/slugs without an alias row: a scan of the agent's entities
            rows = conn.execute(
                """
                SELECT NULL, coalesce(e.merged_into, e.entity_key), e.display_name
                  FROM mem_entities e
                 WHERE e.agent_id = %(a)s
                   AND (lower(e.display_name) = ANY(%(grams)s) OR split_part(e.entity_key, ':', 2) = ANY(%(slugs)s))
                """,
                params,
            ).fetchall()
        gram_set = set(grams)
        for alias_folded, key, name in rows:
            candidates = {alias_folded} if alias_folded else set()
            candidates.add(match_key(name))
            slug_gram = slugs.get(key.split(":", 1)[-1])
            if slug_gram:
                candidates.add(slug_gram)
            for gram in candidates & gram_set:
                hits = names.setdefault(gram, [])
                if (key, name) not in hits:
                    hits.append((key, name))
    return names


def load_lookup(
    conn: Any, agent_id: str, analysis: QueryAnalysis, as_of: datetime | None,
    communities: bool = False, names: dict[str, list[tuple[str, str]]] | None = None,
) -> PlannerLookup:
    """Read the agent's names matching the query's n-grams (``load_names``, unless given),
    type prefixes (aggregation only) and 1-hop relationships of the matched entities. Three
    short indexed queries (a fourth with ``communities``: not for as-of retrievals,
    communities are not bi-temporal)."""
    lookup = PlannerLookup()
    lookup.names = load_names(conn, agent_id, analysis) if names is None else names
    if analysis.aggregation_prefixes:
        rows = conn.execute(
            """
            SELECT p FROM unnest(%(p)s::text[]) AS p
             WHERE EXISTS (SELECT 1 FROM mem_entities e WHERE e.agent_id = %(a)s
                             AND e.entity_key >= p || ':' AND e.entity_key < p || ';')
            """,
            {"a": agent_id, "p": list(analysis.aggregation_prefixes)},
        ).fetchall()
        lookup.prefixes = {r[0] for r in rows}
    matched = sorted({key for hits in lookup.names.values() for key, _ in hits})
    if matched:
        lookup.edges, lookup.display_names = load_edges(conn, agent_id, matched, as_of)
        if communities and as_of is None:
            lookup.communities = load_community_edges(conn, agent_id, matched, lookup.display_names)
    return lookup


def load_community_edges(
    conn: Any, agent_id: str, keys: list[str], names: dict[str, str]
) -> list[Edge]:
    """Seed -> fellow member of each community holding a seed (``mem_communities``); fills
    ``names`` with the members' display names."""
    rows = conn.execute(
        """
        SELECT s.seed, m.member, e.display_name
          FROM mem_communities c
          CROSS JOIN LATERAL unnest(c.members) AS m(member)
          JOIN unnest(%(k)s::text[]) AS s(seed) ON s.seed = ANY(c.members)
          LEFT JOIN mem_entities e ON e.agent_id = c.agent_id AND e.entity_key = m.member
         WHERE c.agent_id = %(a)s AND c.members && %(k)s::text[] AND m.member <> s.seed
         ORDER BY s.seed, m.member
        """,
        {"a": agent_id, "k": keys},
    ).fetchall()
    for _, member, name in rows:
        if name:
            names.setdefault(member, name)
    return [Edge(seed, member, "community", 0.0, None) for seed, member, _ in rows]


def load_edges(
    conn: Any, agent_id: str, keys: list[str], as_of: datetime | None, limit_per_entity: int = 50
) -> tuple[list[Edge], dict[str, str]]:
    """Relationships touching ``keys`` in either direction (as seen at ``as_of``), strongest
    first per seed, with the neighbours' display names. Shared by planner, graph, spreading."""
    rows = conn.execute(
        """
        WITH touching AS (
            SELECT r.source_key AS seed, r.target_key AS nb, r.relation_type, r.strength, r.last_seen_at
              FROM mem_relationships r
             WHERE r.agent_id = %(a)s AND r.source_key = ANY(%(k)s)
               AND (%(t)s::timestamptz IS NULL OR r.first_seen_at <= %(t)s::timestamptz)
            UNION ALL
            SELECT r.target_key, r.source_key, r.relation_type, r.strength, r.last_seen_at
              FROM mem_relationships r
             WHERE r.agent_id = %(a)s AND r.target_key = ANY(%(k)s)
               AND (%(t)s::timestamptz IS NULL OR r.first_seen_at <= %(t)s::timestamptz)
        ), ranked AS (
            SELECT *, row_number() OVER (PARTITION BY seed
                       ORDER BY strength DESC, last_seen_at DESC, nb, relation_type) AS rn
              FROM touching WHERE seed <> nb
        )
        SELECT t.seed, t.nb, t.relation_type, t.strength, t.last_seen_at, e.display_name
          FROM ranked t
          LEFT JOIN mem_entities e ON e.agent_id = %(a)s AND e.entity_key = t.nb
         WHERE t.rn <= %(lim)s
         ORDER BY t.seed, t.rn
        """,
        {"a": agent_id, "k": keys, "t": as_of, "lim": limit_per_entity},
    ).fetchall()
    edges = [Edge(seed, nb, rel, float(strength), seen) for seed, nb, rel, strength, seen, _ in rows]
    names = {nb: name for _, nb, _, _, _, name in rows if name}
    return edges, names
