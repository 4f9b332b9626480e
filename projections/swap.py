"""Catch a shadow read model up with the log and swap it in atomically (ADR-0027).

The live projector — in this process or another (ADR-0020's elected runner) — keeps running
while the shadow is built, so the live read model stays current and readers never wait. Then:

1. **catch-up without locks**: events appended since the bulk fold are applied to the shadow by
   the read model's own view (same handlers, same exactly-once tracking), pointed at the shadow
   through its search path, until the shadow is near the head of the log;
2. if a projector runs (holds the projection's lease, or its position is moving), wait
   (bounded) until the live tracking position reaches the shadow's, so the shadow is never
   *ahead* of the projector that will continue on it;
3. **the swap transaction**: ``LOCK … IN EXCLUSIVE MODE`` on the live tracking table — every
   projector batch starts by upserting that row, so from here no batch commits and the live
   position ``L`` is final (readers of the tracking table, e.g. ``wait_for_position``, are not
   blocked); catch the shadow up to ``L`` (events up to ``L`` were applied live, so none is lost
   and none applied twice); then, under ``lock_timeout``, ``ALTER TABLE … SET SCHEMA`` the live
   tables out to a trash schema and the shadow's in, tracking table included; commit; drop the
   trash afterwards. Readers wait only for the moves (milliseconds) — never for the build. A blocked projector batch resolves
   its tables again once the lock is granted (PostgreSQL re-looks-up a relation name after waiting
   on it) and continues from ``L`` on the new tables.

If the read-model locks are not granted within ``lock_timeout`` (a long reader), the
transaction rolls back — nothing has changed — and the swap is tried again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from eventsourcing.persistence import Tracking
from psycopg import errors, sql

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.advisory_locks import namespace, object_key
from engramdb.projections.positions import APPLICATION_NAME
from engramdb.projections.read_model import ReadModel, ReadModelView, bind_view, datastore_factory
from engramdb.projections.shadow import shadow_search_path

log = logging.getLogger(__name__)

CATCH_UP_PAGE = 500  # events per catch-up batch (the projector's own batch bound)
NEAR_HEAD = 200  # catch up without locks until this close to the head of the log
LOCK_TIMEOUT = "1s"  # longest a reader may wait for the swap; then roll back and retry
SWAP_ATTEMPTS = 20
LEASE_WAIT = 30.0  # seconds to wait for a running projector to reach the shadow's position
IDLE = 2.0  # a live position that has not moved for this long: no projector is running


@dataclass
class SwapResult:
    position: int | None
    caught_up: int  # events applied to the shadow after the bulk fold
    seconds: float  # the swap transaction (tracking lock held), last attempt
    attempts: int
    blocked_seconds: float  # read-model tables locked: drop, move, commit (readers wait)


class ShadowCatchUp:
    """Applies log events to a shadow read model with the read model's own view."""

    def __init__(self, app: Any, env: dict[str, str], rm: ReadModel, embedder: EmbeddingProvider,
                 live: str, shadow: str, position: int | None) -> None:
        self.app = app
        self.factory = datastore_factory(rm.name, {**env, "POSTGRES_SCHEMA": shadow})
        view_class = bind_view(rm.view, embedder)
        self.view: ReadModelView = view_class(
            self.factory.datastore, tracking_table_name=f"{rm.name}_tracking", bulk=True)
        self.view.search_path = shadow_search_path(shadow, live)
        self.position = position or 0
        self.applied = 0

    def to(self, stop: int | None) -> int:
        """Apply events after the current position up to ``stop`` (default: the head)."""
        recorder, to_event = self.app.recorder, self.app.mapper.to_domain_event
        if stop is None:
            stop = recorder.max_notification_id() or 0
        while self.position < stop:
            page = recorder.select_notifications(
                start=self.position, limit=CATCH_UP_PAGE, stop=stop, inclusive_of_start=False)
            if not page:
                break
            self.view.apply_batch(
                [(to_event(n), Tracking(self.app.name, n.id)) for n in page])
            self.position = page[-1].id
            self.applied += len(page)
        return self.position

    def close(self) -> None:
        self.factory.close()


def lease_held(conn: Any, schema: str, projection: str) -> bool:
    """Whether some process runs ``projection`` (holds its ADR-0020 lease) right now."""
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
        " AND classid = %s::oid AND objid = %s::oid"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (namespace("projection", schema, APPLICATION_NAME), object_key(projection)),
    ).fetchone()
    return bool(row and row[0])


def live_position(conn: Any, schema: str, tracking: str, application_name: str) -> int | None:
    """The live tracking position; None when there is no tracking table (or row) yet."""
    row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}"."{tracking}"',)).fetchone()
    if row is None or row[0] is None:
        return None
    row = conn.execute(
        sql.SQL("SELECT notification_id FROM {}.{} WHERE application_name = %s").format(
            sql.Identifier(schema), sql.Identifier(tracking)), (application_name,)).fetchone()
    return None if row is None else int(row[0])


def swap_in(
    conninfo: str,
    catch_up: ShadowCatchUp,
    rm: ReadModel,
    live: str,
    shadow: str,
    model_id: str,
    dimensions: int,
    lock_timeout: str = LOCK_TIMEOUT,
    attempts: int = SWAP_ATTEMPTS,
) -> SwapResult:
    """Catch ``shadow`` up and move it into ``live`` in one transaction (see the module doc)."""
    tracking = f"{rm.name}_tracking"
    app_name = catch_up.app.name
    conn: Any
    with psycopg.connect(conninfo, autocommit=True) as conn:  # transactions are explicit
        for attempt in range(1, attempts + 1):
            for _ in range(5):  # without locks, while the log keeps growing
                head = catch_up.app.recorder.max_notification_id() or 0
                if head - catch_up.to(head) < NEAR_HEAD:
                    break
            if rm.projected:
                _wait_for_live(conn, live, rm.name, tracking, app_name, catch_up.position)
            started = time.perf_counter()
            try:
                with conn.transaction():
                    conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(
                        sql.Literal(lock_timeout)))
                    if rm.projected and live_position(conn, live, tracking, app_name) is not None:
                        conn.execute(sql.SQL("LOCK TABLE {}.{} IN EXCLUSIVE MODE").format(
                            sql.Identifier(live), sql.Identifier(tracking)))
                        final = live_position(conn, live, tracking, app_name)
                        if final is not None and final > catch_up.position:
                            catch_up.to(final)
                    moving = time.perf_counter()
                    _move(conn, rm, live, shadow, tracking if rm.projected else None)
                    conn.execute(sql.SQL(
                        "INSERT INTO {}.mem_read_model_meta (projection, embedding_model, "
                        "dimensions) VALUES (%s, %s, %s) ON CONFLICT (projection) DO UPDATE SET "
                        "embedding_model = EXCLUDED.embedding_model, dimensions = "
                        "EXCLUDED.dimensions, built_at = now()").format(sql.Identifier(live)),
                        (rm.name, model_id, dimensions),
                    )
            except errors.LockNotAvailable:
                log.info("rebuild of %s: swap waited %s for readers; retrying (%d/%d)",
                         rm.name, lock_timeout, attempt, attempts)
                continue
            done = time.perf_counter()
            return SwapResult(catch_up.position or None, catch_up.applied, done - started,
                              attempt, done - moving)
    raise TimeoutError(
        f"rebuild of {rm.name}: could not take the read-model tables for the swap in "
        f"{attempts} attempts of {lock_timeout} (a long-running reader?); the live read model "
        f"is unchanged — run the rebuild again when the readers are idle")


def _wait_for_live(conn: Any, live: str, projection: str, tracking: str, app_name: str,
                   position: int) -> None:
    """A running projector will continue on the shadow from its own position, so let it reach
    the shadow's first (it follows the log; this is short unless it is failing). Running =
    holds the lease (ADR-0020), or — an unelected runner — its position moved within
    ``IDLE`` seconds; a projector that is not running is not waited for (past ``IDLE``)."""
    deadline = time.monotonic() + LEASE_WAIT
    last, moved = live_position(conn, live, tracking, app_name), time.monotonic()
    while True:
        current = live_position(conn, live, tracking, app_name)
        now = time.monotonic()
        if current is None or current >= position or now > deadline:
            return
        if current != last:
            last, moved = current, now
        elif now - moved > IDLE and not lease_held(conn, live, projection):
            return
        time.sleep(0.02)


def _move(conn: Any, rm: ReadModel, live: str, shadow: str, tracking: str | None) -> None:
    """Live tables out to a trash schema, the shadow's in: catalog updates only. The old
    tables are dropped after the commit (``drop_trash``): dropping them here cost seconds of
    readers' time on a busy box."""
    names: Sequence[str] = [*rm.table_names, *([tracking] if tracking else [])]
    trash = trash_schema(shadow)
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(trash)))
    for name in names:
        row = conn.execute("SELECT to_regclass(%s)", (sql.Identifier(live, name).as_string(conn),)
                           ).fetchone()
        if row is not None and row[0] is not None:
            conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(
                sql.Identifier(live, name), sql.Identifier(trash)))
    for name in names:
        conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(
            sql.Identifier(shadow, name), sql.Identifier(live)))


def trash_schema(shadow: str) -> str:
    """Where the replaced live tables wait for their drop, after the swap committed."""
    return f"{shadow}_old"
