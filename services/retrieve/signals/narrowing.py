"""A retrieve narrowed to some turns, as its statements test it (issue 24, ADR-0047):
``Narrowing``, the compiled predicate every candidate statement ANDs into its WHERE clause
(``services/retrieve/scope.py`` compiles it from a ``RetrieveFilter``), and the names of its
bound parameters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from engramdb.projections.scope_keys import scope_keys_sql

TURN_ALIAS = "\x00turn\x00"  # the turn alias placeholder inside a compiled narrowing


@dataclass(frozen=True)
class Narrowing:
    """A retrieve narrowed to some turns (``services/retrieve/scope.py`` compiles it from a
    ``RetrieveFilter``, ADR-0047): a predicate over one turn, with its bound parameters.

    A turn passes when it satisfies the predicate; a fact passes when ONE of its source turns
    does. The visibility helpers below AND it into every candidate statement's WHERE clause,
    under its ORDER BY / LIMIT — never a filter after the top k. Its parameters are named
    ``nw*`` / ``mf*``, which no statement uses otherwise. ``selective``: few turns pass (a
    capped count, ``scope.probe``) — nearest-row searches then take the exact branch over
    the passing rows instead of an HNSW walk that would skip most of what it visits."""

    turn_sql: str
    params: Mapping[str, Any] = field(default_factory=dict)
    selective: bool = False
    # the passing turns are few enough to search exactly, though their facts are not
    # (``scope.EXACT_TURNS``; implied by ``selective``): see ``exact_turns_when_few``
    few_turns: bool = False
    # selective, its passing turns lie sparse in the sessions they touch (``scope.probe``):
    # a walk of the session-order index tests their ids (``listed_turns``)
    sparse_turns: bool = False

    def turn(self, alias: str) -> str:
        return self.turn_sql.replace(TURN_ALIAS, alias)

    def fact(self, alias: str) -> str:
        """Selective: the fact is one of those drawn from a passing turn, listed once per call
        by ``scope.probe`` (``nwf``, a hashed subplan test per row the statement reads).
        Else one probe of the turns' primary key per row the statement visits, which a broad
        filter passes at once.

        Why not ``fact_id = ANY(%(nwf)s)``: a constant array in a WHERE clause is estimated
        element by element when the statement is planned — ~2 ms per statement for the 2000
        ids of a 2 % filter at 100k facts, several statements per call (ADR-0047); a list
        behind a subquery is a parameter to the planner (~0.1 ms).

        ``copied`` (the filter is one containment of a turn's scope): the fact's own copy of
        its source turns' session and metadata, in the row — neither a list nor a probe.
        Written as a ``coalesce`` so that no plan takes its GIN index for a row test (a
        generic plan would estimate it at 1 % and sort a broad filter's half of the rows
        instead of walking the HNSW index); ``fact_by_key`` is the indexable form."""
        if self.copied:
            return f"coalesce({self._copy_contains(alias)}, false)"
        if self.selective:
            return f"{alias}.fact_id IN (SELECT unnest(%(nwf)s::text[]))"
        return f"EXISTS ({self._source_turn(alias)})"

    @property
    def copied(self) -> bool:
        """Facts are tested on their ``source_scope`` copy (``scope.scope_containments``)."""
        return "nwc" in self.params

    @property
    def keyed(self) -> bool:
        """Copied, and each of its elements is one of a fact's exact scope keys
        (``projections/scope_keys.py``): a session, or one string or boolean value."""
        return self.copied and "nwk" in self.params

    def without_keys(self) -> Narrowing:
        """This narrowing tested by its containments only (a database without the keys' index)."""
        return replace(self, params={k: v for k, v in self.params.items() if k != "nwk"})

    def _copy_contains(self, alias: str) -> str:
        """The copy contains one of the filter's elements (``nwc``, ``nwc_1``, …): ORed
        containments, which a bitmap scan answers as an OR of GIN lookups."""
        names = [name for name in copy_param_names(len(self.params)) if name in self.params]
        return " OR ".join(f"{alias}.source_scope @> %({name})s::jsonb" for name in names)

    def fact_by_key(self, alias: str) -> str:
        """``fact`` for a statement the listed ids should drive (the exact nearest rows over
        them): ``fact_id = ANY`` of the list as one runtime value, which the primary key
        looks up id by id, planned without reading the ids (see ``fact``). Copied and
        selective: the containment itself, which the GIN index of ``source_scope`` finds —
        one bitmap of the passing facts, read in page order (2000 facts: 2.7 ms against a
        listing of 4.6–5.3 ms and a read by key of 4.6–5.1 ms, ADR-0047); ``keyed``: the
        overlap of its keys, which the exact index of the facts' keys finds without re-testing
        each row (ten sessions' 10,000 facts: 17.8 → 5.5 ms for the nearest 60)."""
        if self.copied:
            if not self.selective:
                return self.fact(alias)
            if self.keyed:  # the same facts by the exact keys' index: no row re-tested
                return f"{scope_keys_sql(alias)} && %(nwk)s::text[]"
            return f"({self._copy_contains(alias)})"
        if self.selective:
            return f"{alias}.fact_id = ANY((SELECT %(nwf)s::text[])::text[])"
        return self.fact(alias)

    @cached_property
    def listed(self) -> frozenset[str] | None:
        """The listed fact ids of a selective narrowing (``None`` otherwise), to test rows
        already fetched by id in Python instead of in their statement."""
        return frozenset(self.params.get("nwf") or ()) if self.selective and not self.copied else None

    def listed_turns(self) -> Narrowing | None:
        """A selective narrowing whose passing turns are listed (``nwt``), as a narrowing that
        tests a turn's id against that list instead of its session and metadata (``None``
        otherwise). Why: the test then reads only the turn's key, so a walk of an index
        holding the key (``tail_lists.neighbours``, the session-order index) can skip the
        turns that do not pass without reading their rows — a rare filter spread over every
        session read ~50 rows per passing neighbour (ADR-0047). The list is the probe's, which
        listed the facts too (read once per call, like ``nwf``: a turn projected after the
        probe is left out); a copied narrowing lists none (``lists_turns_late``)."""
        if not self.selective or "nwt" not in self.params:
            return None
        # ``IS TRUE``: a hashed subplan, built once per statement; a bare ``IN`` was pulled up
        # into a semi-join that hashed the list again for every anchor (4.0 vs 2.6 ms)
        return Narrowing(f"({TURN_ALIAS}.message_id IN (SELECT unnest(%(nwt)s::text[]))) IS TRUE",
                         self.params, True, sparse_turns=True)

    @property
    def lists_turns_late(self) -> bool:
        """Selective and sparse, its passing turns not listed by the probe (a ``copied``
        verdict, kept across calls by ``BroadVerdicts``): the neighbour walk reads those of
        its anchors' sessions itself (``tail_lists.neighbours``)."""
        return self.selective and self.sparse_turns and "nwt" not in self.params

    def fact_late(self, alias: str) -> str:
        """``fact``'s per-row probe as a ``late_probe``, for rows read in a fenced order."""
        return late_probe(self._source_turn(alias))

    def _source_turn(self, alias: str) -> str:
        return (f"SELECT true FROM mem_messages nw WHERE nw.agent_id = {alias}.agent_id"
                f" AND nw.message_id = ANY({alias}.source_message_ids) AND {self.turn('nw')}")


def copy_param_names(count: int) -> list[str]:
    """The parameter names of a narrowing's ``count`` copy elements: ``nwc``, ``nwc_1``, …"""
    return [f"nwc_{i}" if i else "nwc" for i in range(count)]


def late_probe(select_true: str) -> str:
    """A per-row test to run on rows that come in a fenced order (``… ORDER BY … OFFSET 0) s
    WHERE <test> LIMIT n``), as a scalar subquery: an ``EXISTS`` there may be pulled up into a
    semi-join, and a hashed semi-join need not keep the order — LIMIT then keeps rows that are
    not the best (seen with BM25's scored rows). A scalar subplan is a filter on the ordered
    scan, evaluated row by row until LIMIT is met."""
    return f"coalesce(({select_true} LIMIT 1), false)"
