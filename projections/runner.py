"""Running the projections: eventsourcing ``ProjectionRunner``s, read-your-writes waits.

``ProjectionSet`` starts one runner per projected read model of ``READ_MODELS`` against the
application class it is given (projections must not import ``services``), and creates the
tables of read models that no event changes yet (``ReadModel.projected``). Each runner resumes
from its view's tracking position and follows new events (LISTEN/NOTIFY), applying them in
batches (``projections.batching``: whatever the subscription has already fetched, up to
``max_batch_events``, in one transaction per batch). ``wait(position)`` blocks until every
projection has applied the log up to that notification id.

A ``projections.supervisor.Supervisor`` thread restarts a runner that died (database restart,
failing statement) with capped exponential backoff; ``status()`` reports liveness, restarts
and the last error per projection (``Memory.health``, ``/metrics``).

Several processes on one database (ADR-0020): a supervised set *elects* one runner per
projection with a PostgreSQL session advisory lock (``infra.advisory_locks``) on a dedicated
connection. The holder runs the projection; the other processes keep it *standby* (reported by
``status()``), try the lock every ``STANDBY_POLL`` seconds and take over once the holder's
session ends (a ``kill -9`` included), after a grace of two lease pings. ``wait`` works the same in a standby process: it reads
the projection's tracking table.

``wait_for_position`` does the same from any process (e.g. a retrieve replica) by polling the
tracking tables: positions are data in PostgreSQL, not state of a runner.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

import psycopg

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.advisory_locks import AdvisoryLocks, namespace, object_key
from engramdb.projections.batching import BatchingProjectionRunner, with_batching
from engramdb.projections.positions import (
    APPLICATION_NAME,
    _conninfo,
    _poll,
    tracking_positions,
    wait_for_position,
)
from engramdb.projections.read_model import (
    ReadModel,
    ReadModelView,
    bind_view,
    create_tables,
    datastore_factory,
)
from engramdb.projections.read_models import PROJECTION_NAMES, select
from engramdb.projections.rebuild import RebuildReport, rebuild
from engramdb.projections.supervisor import ProjectorStatus, Supervisor

__all__ = [  # positions are re-exported: callers import them from here
    "APPLICATION_NAME", "PROJECTION_NAMES", "ProjectionSet", "tracking_positions", "wait_for_position",
]

log = logging.getLogger(__name__)


class ProjectionSet:
    """The read-model projectors of one event store, run in this process on threads."""

    def __init__(
        self,
        application_class: type[Any],
        env: dict[str, str],
        embedder: EmbeddingProvider,
        projections: str | Sequence[str] | None = None,
        *,
        max_batch_events: int | None = None,
        max_batch_wait: float | None = None,
        supervise: bool = True,
        on_restart: Callable[[str], None] | None = None,
        supervisor_options: dict[str, float] | None = None,
        elect: bool = True,
    ) -> None:
        """``max_batch_events`` (default 500; 1 = the per-event path) and ``max_batch_wait``
        (seconds to linger for more events, default 0) bound each projection transaction.
        ``supervise`` restarts dead runners (``on_restart(name)`` after each restart;
        ``supervisor_options``: ``Supervisor`` backoff keywords). ``elect`` (supervised only):
        run a projection here only while holding its lease, else stand by (ADR-0020)."""
        self.application_class = application_class
        self.env = dict(env)
        self.embedder = embedder
        self.read_models = select(projections)
        self.names = tuple(rm.name for rm in self.read_models)
        self.max_batch_events = max_batch_events
        self.max_batch_wait = max_batch_wait
        self.runners: dict[str, BatchingProjectionRunner[ReadModelView]] = {}
        self.supervise = supervise
        self.on_restart = on_restart
        self.supervisor_options = dict(supervisor_options or {})
        self._lock = threading.Lock()
        self._supervisor: Supervisor | None = None
        self._started = False
        self.elect = elect and supervise
        self._leases: AdvisoryLocks | None = None
        self._lease_ns = namespace(
            "projection", self.env.get("POSTGRES_SCHEMA", "public"), APPLICATION_NAME
        )

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> ProjectionSet:
        """Construct (same arguments as the constructor) and start the projectors."""
        return cls(*args, **kwargs)._start()

    def _start(self) -> ProjectionSet:
        standby: list[str] = []
        try:
            if self.elect:
                self._leases = AdvisoryLocks(_conninfo(self.env), "engramdb-projector-leases")
            for rm in self.read_models:
                if not rm.projected:
                    self._create_tables(rm)
                    continue
                runner = self._elected_runner(rm.name)
                if runner is None:
                    standby.append(rm.name)
                    continue
                with self._lock:
                    self.runners[rm.name] = runner
        except BaseException:
            self.stop()
            raise
        self._started = True
        if self.supervise:
            self._supervisor = Supervisor(
                [*self.runners, *standby], self.runners, self._lock, self._restart_runner,
                on_restart=self.on_restart, holds=self._holds if self.elect else None,
                **self.supervisor_options,
            )
            for name in standby:
                state = self._supervisor.status[name]
                state.running, state.standby = False, True
            self._supervisor.start()
        if standby:
            log.info("projections %s run in another process; standing by", ", ".join(standby))
        return self

    def _elected_runner(
        self, name: str, grace: bool = False
    ) -> BatchingProjectionRunner[ReadModelView] | None:
        """A started runner if this process holds (or takes) the projection's lease, else None.

        ``grace`` (a takeover): wait one lease ping before running, so a holder that lost its
        session without dying (network cut) has noticed and stopped — otherwise both would run
        for up to a second, and one of them would fail on the tracking table."""
        if self._leases is None:
            return self._new_runner(name)
        key = object_key(name)
        had = self._leases.holds(self._lease_ns, key)
        if not self._leases.try_acquire(self._lease_ns, key):
            return None
        if grace and not had:
            time.sleep(2 * self._leases.ping_every)
        try:
            return self._new_runner(name)
        except BaseException:
            self._leases.release(self._lease_ns, key)  # let a healthy process take it
            raise

    def _holds(self, name: str) -> bool:
        leases = self._leases
        return leases is not None and (self._lease_ns, object_key(name)) in leases.check()

    def standby(self) -> set[str]:
        """Projections another process runs (this one stands by to take over)."""
        supervised = self._supervisor.status if self._supervisor is not None else {}
        current = self._current()
        return {n for n, s in supervised.items() if s.standby and n not in current}

    def _tracked(self, names: Iterable[str]) -> dict[str, int | None]:
        """Positions from the tracking tables (for projections not running in this process)."""
        names = tuple(names)
        if not names:
            return {}
        schema = self.env.get("POSTGRES_SCHEMA", "public")
        if self._leases is not None:
            return self._leases.run(lambda conn: tracking_positions(conn, schema, names))
        with psycopg.connect(_conninfo(self.env), autocommit=True) as conn:
            return tracking_positions(conn, schema, names)

    def _restart_runner(self, name: str) -> BatchingProjectionRunner[ReadModelView] | None:
        """``_new_runner`` once the server answers a plain connection within 2 s.

        Without the probe, a runner built while the database is down blocks in its pool,
        whose own reconnect backoff (1, 2, 4, 8, 16 s) can delay recovery by up to 16 s
        after the server is back; failing fast keeps the supervisor's backoff (<= 2 s) in
        charge."""
        psycopg.connect(_conninfo(self.env), connect_timeout=2).close()
        return self._elected_runner(name, grace=True)

    def _new_runner(self, name: str) -> BatchingProjectionRunner[ReadModelView]:
        """A started runner for read model ``name`` (resumes from its tracking position)."""
        rm = next(r for r in self.read_models if r.name == name)
        runner: BatchingProjectionRunner[ReadModelView] = BatchingProjectionRunner(
            application_class=self.application_class,
            projection_class=with_batching(rm.projection, self.max_batch_events, self.max_batch_wait),
            view_class=bind_view(rm.view, self.embedder),
            env=self.env,
        )
        try:
            return runner.__enter__()
        except BaseException:
            runner.__exit__(None, None, None)
            runner.view.datastore.close()
            raise

    def _create_tables(self, rm: ReadModel) -> None:
        factory = datastore_factory(rm.name, self.env)
        try:
            create_tables(factory.datastore, rm, self.embedder.dimensions)
        finally:
            factory.close()

    @property
    def running(self) -> bool:
        """True between start and stop (also while a dead runner waits to be restarted)."""
        return self._started

    def _current(self) -> dict[str, BatchingProjectionRunner[ReadModelView]]:
        with self._lock:
            return dict(self.runners)

    def positions(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {
            name: runner.view.max_tracking_id(runner.app_name)
            for name, runner in self._current().items()
        }
        return {**self._tracked(self.standby() - out.keys()), **out}

    def alive(self) -> dict[str, bool]:
        """Per projector: following the log here, or standing by for another process's
        (False once its thread died)."""
        return {name: status.running or status.standby for name, status in self.status().items()}

    def status(self) -> dict[str, ProjectorStatus]:
        """Per in-process projector: running, restarts, consecutive failures, last error."""
        current = self._current()
        supervised = self._supervisor.status if self._supervisor is not None else {}
        out: dict[str, ProjectorStatus] = {}
        for name in supervised.keys() | current.keys():
            base = supervised.get(name) or ProjectorStatus()
            runner = current.get(name)
            running = runner is not None and not runner.is_interrupted.is_set()
            out[name] = ProjectorStatus(
                running=running, standby=base.standby and runner is None, restarts=base.restarts, failures=base.failures,
                last_error=base.last_error, started_at=base.started_at,
            )
        return out

    def wait(self, position: int | None, timeout: float = 30.0) -> None:
        """Read-your-writes: block until every projection applied ``position``.

        Supervised, a dead projector is waited for (the supervisor restarts it) until the
        timeout, whose ``TimeoutError`` names the projector's error; unsupervised, its own
        error is raised at once.
        """
        if position is None or not self._started:
            return
        names = [rm.name for rm in self.read_models if rm.projected]

        def lagging() -> list[str]:
            behind: list[str] = []
            current = self._current()
            standby = self.standby()
            if standby:  # run by another process: its tracking table tells
                try:
                    tracked = self._tracked(standby)
                except Exception as exc:  # noqa: BLE001 - the database is away: keep waiting
                    tracked = {}
                    log.debug("reading tracking positions failed: %s", exc)
                behind.extend(f"{n} (in another process)" for n in standby
                              if (tracked.get(n) or 0) < position)
            for name in names:
                if name in standby:
                    continue
                runner = current.get(name)
                if runner is None or runner.is_interrupted.is_set():
                    if not self.supervise and runner is not None:
                        runner.run_forever(timeout=0)  # re-raises a processing thread's error
                        raise RuntimeError(f"projection {name!r} has stopped")
                    behind.append(self._why_behind(name, "restarting"))
                    continue
                try:
                    current_position = runner.view.max_tracking_id(runner.app_name)
                except Exception as exc:  # noqa: BLE001 - the runner will die and be restarted
                    behind.append(f"{name} ({type(exc).__name__})")
                    continue
                if current_position is None or current_position < position:
                    behind.append(self._why_behind(name, "recovering"))
            return behind

        _poll(lagging, position, timeout, "projections")

    def _why_behind(self, name: str, state: str) -> str:
        """``name``, with the error it is recovering from if it is (for ``TimeoutError``)."""
        status = self._supervisor.status.get(name) if self._supervisor is not None else None
        if status is None or not status.failing:
            return name if state == "recovering" else f"{name} ({state})"
        return f"{name} ({state} after {status.last_error})"

    def stop(self) -> None:
        """Stop every runner (joins its threads, closes its connections).

        A runner's processing error is re-raised when unsupervised; supervised, it was
        already logged and reported by the supervisor, so closing after a database crash
        just closes."""
        supervised = self._supervisor is not None
        if self._supervisor is not None:
            self._supervisor.stop()  # first: it must not restart what we stop here
            self._supervisor = None
        self._started = False
        errors: list[BaseException] = []
        with self._lock:
            runners, self.runners = dict(self.runners), {}
        for runner in runners.values():
            try:
                runner.__exit__(None, None, None)
            except BaseException as exc:  # noqa: BLE001 - stop the others first
                errors.append(exc)
            finally:
                runner.view.datastore.close()
        if errors and not supervised:
            raise errors[0]
        for error in errors:
            log.info("projector stopped with %s: %s", type(error).__name__, error)
        if self._leases is not None:  # after the runners: a standby may take over now
            self._leases.close()
            self._leases = None

    def rebuild(self, projection: str | None = None, progress: bool = False) -> RebuildReport:
        """Rebuild from the log (bulk mode) into shadow tables and swap them in; the runners
        keep running and continue on the new tables (ADR-0027)."""
        return rebuild(self.application_class, self.env, self.embedder, projection, progress)

    def __enter__(self) -> ProjectionSet:
        if not self._started:
            self._start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
