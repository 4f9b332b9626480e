"""Property: for any sequence of decisions, the projected ``mem_facts`` equals the pure fold
(``domain.fold``) of the same events read back from the log.

A hypothesis state machine drives two agents' aggregates with random decisions (register,
alias, merge, add, update, confirm, retract, forget, relate, reject), with conversation times that
may go backwards (backfilled messages), saves them, and compares after waiting for the
projection. Job events (``AgentJobs``: retrievals observed, importance assessed; ADR-0019;
vitality, communities, profiles: ADR-0022) and
corrections interleave with the decisions; the fold then reads the whole log in order. Embedder: ``HashEmbedder`` (deterministic test double).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test
from psycopg.rows import dict_row

from engramdb.domain.errors import DecisionRejected
from engramdb.domain.fold import FactFold, FactRow
from engramdb.domain.jobs import AgentJobs
from engramdb.domain.payloads import FactPayload, fact_sources
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.read_models.memory.fold import MemoryFold
from engramdb.projections.runner import ProjectionSet
from engramdb.services.memory.event_log import EventLog

T0 = datetime(2023, 1, 1, tzinfo=UTC)
NAMES = ["ana", "bo", "cy", "di"]
TEXTS = ["likes tea", "lives in Rome", "has a cat", "works at Vertix", "likes tea!"]
COLUMNS = [f for f in FactRow.__dataclass_fields__]


def test_projection_equals_pure_fold(pg_url: str, fresh_schema: Any) -> None:
    schema, env = fresh_schema("prop")
    app = EventLog(env)
    projections = ProjectionSet.start(EventLog, env, HashEmbedder())

    def table_rows(agent: str) -> dict[str, dict[str, Any]]:
        with psycopg.connect(pg_url, row_factory=dict_row) as conn:
            conn.execute(f'SET search_path TO "{schema}", public')
            rows = conn.execute(
                f"SELECT {', '.join(COLUMNS)} FROM mem_facts WHERE agent_id = %s", (agent,)
            ).fetchall()
        return {r["fact_id"]: r for r in rows}

    def usage_rows(agent: str) -> dict[str, dict[str, Any]]:
        with psycopg.connect(pg_url, row_factory=dict_row) as conn:
            conn.execute(f'SET search_path TO "{schema}", public')
            rows = conn.execute("SELECT * FROM mem_fact_usage WHERE agent_id = %s",
                                (agent,)).fetchall()
        return {r["fact_id"]: r for r in rows}

    def community_rows(agent: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(pg_url) as conn:
            conn.execute(f'SET search_path TO "{schema}", public')
            return sorted(conn.execute("SELECT * FROM mem_communities WHERE agent_id = %s "
                                       "ORDER BY community_id", (agent,)).fetchall())

    class Decisions(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            run = uuid.uuid4().hex[:8]
            self.agents = [f"p-{run}-a", f"p-{run}-b"]
            self.position = 0
            self.clock = 0
            self.counter = 0

        def _save(self, agent: str, command: Any) -> None:
            mem = app.agent_memory(agent)
            self.clock += 1
            try:
                command(mem)
            except DecisionRejected as exc:
                mem.reject(f"m{self.clock}", {"text": "x"}, exc.reason)
            recordings = app.save(mem)
            if recordings:  # an alias already known decides nothing
                self.position = recordings[-1].notification.id

        def at(self, skew: int) -> datetime:
            return T0 + timedelta(hours=self.clock + skew)

        @rule(a=st.integers(0, 1), name=st.sampled_from(NAMES))
        def register(self, a: int, name: str) -> None:
            self._save(self.agents[a], lambda m: m.register_entity(
                f"person:{name}", name.title(), "person", f"m{self.clock}", {"by": "h"}))

        @rule(a=st.integers(0, 1), name=st.sampled_from(NAMES), alias=st.sampled_from(["X", "Yy"]))
        def alias(self, a: int, name: str, alias: str) -> None:
            self._save(self.agents[a], lambda m: m.add_alias(f"person:{name}", alias, "m"))

        @rule(a=st.integers(0, 1), x=st.sampled_from(NAMES), y=st.sampled_from(NAMES))
        def merge(self, a: int, x: str, y: str) -> None:
            self._save(self.agents[a], lambda m: m.merge_entities(
                f"person:{x}", f"person:{y}", "m", "same"))

        @rule(a=st.integers(0, 1), x=st.sampled_from(NAMES), y=st.sampled_from(NAMES))
        def relate(self, a: int, x: str, y: str) -> None:
            self._save(self.agents[a], lambda m: m.observe_relationship(
                f"person:{x}", f"person:{y}", "knows", "m", self.at(0)))

        def _fact(self, mem: Any, name: str, text: str, skew: int, linked: list[str]) -> FactPayload:
            self.counter += 1
            return FactPayload(
                fact_id=f"f{self.counter}", entity_key=mem.canonical_entity(f"person:{name}"),
                linked_entities=[mem.canonical_entity(f"person:{k}") for k in linked],
                attribute_key=None, text=f"{name} {text}", category="general",
                confidence=0.6, importance=0.5, source_message_id=f"m{self.clock}",
                source_message_ids=fact_sources(f"m{self.clock}", ["m0", "m1"]),
                speaker=None, valid_from=self.at(skew), decided_by={"by": "h"},
            )

        @rule(a=st.integers(0, 1), name=st.sampled_from(NAMES), text=st.sampled_from(TEXTS),
              skew=st.integers(-30, 5), linked=st.lists(st.sampled_from(NAMES), max_size=2))
        def add(self, a: int, name: str, text: str, skew: int, linked: list[str]) -> None:
            self._save(self.agents[a], lambda m: m.add_fact(self._fact(m, name, text, skew, linked)))

        def _target(self, mem: Any, pick: int) -> str:
            active = sorted(mem.active_facts)
            if not active:
                raise DecisionRejected("no active fact")
            return active[pick % len(active)]

        @rule(a=st.integers(0, 1), pick=st.integers(0, 50), text=st.sampled_from(TEXTS),
              skew=st.integers(-30, 5))
        def update(self, a: int, pick: int, text: str, skew: int) -> None:
            def command(m: Any) -> None:
                target = self._target(m, pick)
                name = m.active_facts[target][0].split(":")[1]
                m.update_fact(target, self._fact(m, name, text, skew, []))
            self._save(self.agents[a], command)

        @rule(a=st.integers(0, 1), pick=st.integers(0, 50), skew=st.integers(-30, 5))
        def confirm(self, a: int, pick: int, skew: int) -> None:
            self._save(self.agents[a], lambda m: m.confirm_fact(
                self._target(m, pick), f"m{self.clock % 4}", self.at(skew)))

        @rule(a=st.integers(0, 1), pick=st.integers(0, 50))
        def retract(self, a: int, pick: int) -> None:
            self._save(self.agents[a], lambda m: m.retract_fact(
                self._target(m, pick), "m", self.at(0), "no", {"by": "h"}))

        @rule(a=st.integers(0, 1), skew=st.integers(-30, 5))
        def forget(self, a: int, skew: int) -> None:
            self._save(self.agents[a], lambda m: m.forget(self.at(skew), "user request", {"by": "h"}))

        @rule(a=st.integers(0, 1), pick=st.integers(0, 50), text=st.sampled_from(TEXTS))
        def correct(self, a: int, pick: int, text: str) -> None:
            def command(m: Any) -> None:
                target = self._target(m, pick)
                name = m.active_facts[target][0].split(":")[1]
                new = self._fact(m, name, text, 0, [])
                m.update_fact(target, new)
                m.note_correction(new.fact_id, target, f"m{self.clock}", "actually")
            self._save(self.agents[a], command)

        def _jobs(self, agent: str, command: Any) -> None:
            try:
                jobs: Any = app.repository.get(AgentJobs.create_id(agent))
            except Exception:  # noqa: BLE001 - first job event of this agent
                jobs = AgentJobs(agent_id=agent)
            command(jobs)
            recordings = app.save(jobs)
            if recordings:
                self.position = recordings[-1].notification.id

        def _known(self, a: int, picks: list[int]) -> list[str]:
            known = sorted(f for (agent, f) in self.fold().rows if agent == self.agents[a])
            return [known[p % len(known)] for p in picks] + ["f-unknown"] if known else []

        @rule(a=st.integers(0, 1), picks=st.lists(st.integers(0, 50), max_size=3),
              n=st.integers(1, 3), skew=st.integers(-30, 5))
        def retrieved(self, a: int, picks: list[int], n: int, skew: int) -> None:
            ids = self._known(a, picks)
            at = self.at(skew).isoformat()
            self._jobs(self.agents[a], lambda j: j.observe_retrievals(
                dict.fromkeys(ids, n), dict.fromkeys(ids, at), n, j.feedback_sequence + n))

        @rule(a=st.integers(0, 1), picks=st.lists(st.integers(0, 50), max_size=3),
              value=st.sampled_from([0.5, 0.6, 0.713, 0.95]))
        def assess(self, a: int, picks: list[int], value: float) -> None:
            ids = self._known(a, picks)
            self._jobs(self.agents[a], lambda j: j.assess_importance(
                "test", dict.fromkeys(ids, value), {}, self.at(0)))

        @rule(a=st.integers(0, 1), picks=st.lists(st.integers(0, 50), max_size=3),
              value=st.sampled_from([0.1, 0.25, 0.6, 0.95]))
        def vitality(self, a: int, picks: list[int], value: float) -> None:  # ADR-0022
            ids = self._known(a, picks)
            self._jobs(self.agents[a], lambda j: j.assess_vitality(
                "test", dict.fromkeys(ids, value), {i for i in ids if value < 0.3}, self.at(0)))

        @rule(a=st.integers(0, 1), members=st.sets(st.sampled_from(NAMES), min_size=2),
              dissolve=st.booleans(), profile=st.sampled_from(NAMES))
        def communities(self, a: int, members: set[str], dissolve: bool, profile: str) -> None:
            keys = sorted(f"person:{m}" for m in members)
            cid = "c-" + "-".join(keys)

            def command(j: Any) -> None:
                if dissolve:
                    for standing in sorted(j.state_of("communities")):
                        j.dissolve_community(standing, "test")
                j.detect_community(cid, keys, "label", "test")
                j.refresh_profile(f"person:{profile}", f"profile {self.clock}", "template-v1",
                                  [], self.at(0))
            self._jobs(self.agents[a], command)

        def fold(self) -> FactFold:
            head = app.recorder.max_notification_id() or 0
            notes = app.recorder.select_notifications(1, head + 1) if head else []
            return FactFold().apply_all(app.mapper.to_domain_event(n) for n in notes)

        @precondition(lambda self: self.position > 0)
        @rule()
        def check(self) -> None:
            projections.wait(self.position, timeout=20)
            folded = self.fold()
            for agent in self.agents:
                expected = {f: row for (a, f), row in folded.rows.items() if a == agent}
                actual = table_rows(agent)
                assert set(actual) == set(expected)
                for fid, row in expected.items():
                    # real columns come back as the shortest decimal of the float4: 0.6
                    assert actual[fid] == vars(row), fid
                usage = {f: vars(u) for (a, f), u in folded.usage.items() if a == agent}
                assert usage_rows(agent) == usage
                assert community_rows(agent) == self.communities_folded(agent)

        def communities_folded(self, agent: str) -> list[tuple[Any, ...]]:
            head = app.recorder.max_notification_id() or 0
            memory_fold = MemoryFold()
            for n in app.recorder.select_notifications(1, head + 1) if head else []:
                memory_fold.apply(app.mapper.to_domain_event(n))
            return sorted(r for r in memory_fold.rows("mem_communities") if r[0] == agent)

        def teardown(self) -> None:
            if self.position:
                self.check()

    try:
        run_state_machine_as_test(
            Decisions,
            settings=settings(
                max_examples=20, stateful_step_count=25, deadline=None, database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    finally:
        projections.stop()
        app.close()
