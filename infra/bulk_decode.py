"""Stored events to domain events in bulk, as ``AgentCipherMapper.to_domain_event`` gives them,
at a fraction of its cost (rebuild, ADR-0032).

Why: profiling the rebuild's read+fold at 100k events put two thirds of its time in the
mapper — ``json`` with an ``object_hook`` called per JSON object, a ``dataclasses.replace``
of every stored event to swap in the plaintext, the key id parsed into a ``UUID`` and looked
up per event. Here, for the common case (an encrypted state whose agent key is readable and
whose JSON ``orjson`` parses): the key is looked up once per key id (16 bytes, no UUID), the
plaintext goes straight to ``orjson.loads``, and the transcoder's objects
(``{"_type_": …, "_data_": …}``: datetimes, UUIDs, decimals) are decoded by a walk that does
what the ``object_hook`` does, bottom-up, with the application transcoder's own transcodings.
Upcasting and the event object's construction are the mapper's (``class_version`` upcasters,
``object.__new__`` + ``__dict__``), so the event is the same object, field for field
(``tests/integration/test_bulk_decode.py`` compares every event of a log touching every event kind).

Everything else goes through the mapper itself, unchanged: states stored in clear (events
written before encryption, the ``Erased`` marker — the mapper also forgets the key then),
destroyed or unknown keys (``UndecryptableEvent``), a failed authentication, JSON that
``orjson`` refuses where ``json`` accepts it (``NaN``, integers beyond 64 bits, lone
surrogates), an unregistered transcoding, a mapper with a cipher or compressor of its own.
"""

from __future__ import annotations

from collections.abc import Hashable
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from cryptography.exceptions import InvalidTag
from eventsourcing.persistence import (
    DatetimeAsISO,
    JSONTranscoder,
    StoredEvent,
    UUIDAsHex,
    find_id_convertor,
)
from eventsourcing.utils import resolve_topic

from engramdb.domain.aggregate import AgentMemory
from engramdb.infra.crypto_mapper import _HEAD, MAGIC, AgentCipherMapper

try:  # an optional speed-up: without it every event takes the mapper's path
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency
    orjson = None  # type: ignore[assignment]

_KEY_AT = len(MAGIC)
_NONCE_AT = _KEY_AT + 16
_MISSING = object()
_NATIVE: dict[type[Any], Any] = {DatetimeAsISO: datetime.fromisoformat, UUIDAsHex: UUID}


class _Fallback(Exception):
    """This state needs the mapper's path."""


class BulkDecoder:
    """``decode(originator_id, version, topic, state)`` -> the domain event the mapper gives."""

    def __init__(self, mapper: AgentCipherMapper) -> None:
        self.mapper = mapper
        transcoder = mapper.transcoder
        self.fast = (
            orjson is not None
            and type(transcoder) is JSONTranscoder
            and mapper.cipher is None
            and mapper.compressor is None
            and mapper.keys is not None
        )
        self.names: dict[str, Any] = transcoder.names if self.fast else {}  # type: ignore[attr-defined]
        # transcodings of a string, by name: the library's own ones as the C function their
        # ``decode`` calls (same result: they only assert that the data is a string)
        self._scalar: dict[str, Any] = {
            name: _NATIVE.get(type(t), t.decode) for name, t in self.names.items()}
        self._keys: dict[bytes, Any] = {}
        self._classes: dict[str, tuple[type[Any], Any, int]] = {}
        self.fast_events = 0  # how many took the fast path (diagnostics, tests)

    def decode(self, originator_id: UUID, version: int, topic: str, state: bytes) -> Any:
        if self.fast and state[:_KEY_AT] == MAGIC:
            try:
                event = self._fast(originator_id, version, topic, state)
            except _Fallback:
                pass
            else:
                self.fast_events += 1
                return event
        event = self.mapper.to_domain_event(
            StoredEvent(originator_id=originator_id, originator_version=version, topic=topic,
                        state=bytes(state)))
        if isinstance(event, AgentMemory.Erased):  # the mapper forgot the key: so do we
            self._keys.pop(event.originator_id.bytes, None)
        return event

    def _fast(self, originator_id: UUID, version: int, topic: str, state: bytes) -> Any:
        kid = bytes(state[_KEY_AT:_NONCE_AT])
        key = self._keys.get(kid, _MISSING)
        if key is _MISSING:
            assert self.mapper.keys is not None
            key = self._keys[kid] = self.mapper.keys.for_read(UUID(bytes=kid))
        if key is None:
            raise _Fallback
        try:
            plain = key.decrypt(state[_NONCE_AT:_HEAD], state[_HEAD:],
                                f"{originator_id}:{version}".encode())
            event_state = orjson.loads(plain)
        except (InvalidTag, orjson.JSONDecodeError) as exc:
            raise _Fallback from exc
        if type(event_state) is not dict:
            raise _Fallback
        try:
            event_state = self._top(event_state)
        except Exception as exc:  # noqa: BLE001 - the mapper's path raises its own error
            raise _Fallback from exc
        if type(event_state) is not dict:
            raise _Fallback
        cls, convert, class_version = self._class(topic, type(originator_id))
        event_state["originator_id"] = convert(originator_id)
        event_state["originator_version"] = version
        from_version = event_state.pop("class_version", 1)
        while from_version < class_version:
            getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(event_state)
            from_version += 1
        event = object.__new__(cls)
        object.__setattr__(event, "__dict__", event_state)
        return event

    def _class(self, topic: str, id_type: type[Any]) -> tuple[type[Any], Any, int]:
        found = self._classes.get(topic)
        if found is None:
            cls = resolve_topic(topic)
            found = (cls, find_id_convertor(cls, cast("Hashable", id_type)), getattr(cls, "class_version", 1))
            self._classes[topic] = found
        return found

    def _top(self, state: dict[str, Any]) -> dict[str, Any]:
        """``_walk`` of an event's state, with its common shapes inline: a field holding a
        transcoded scalar (``{"_type_": "datetime_iso", "_data_": "…"}``) is decoded here,
        lists of strings are left alone — two thirds of the decode's time before."""
        fast = self._scalar
        for k, v in state.items():
            tv = type(v)
            if tv is dict:
                if len(v) == 2 and "_type_" in v and "_data_" in v and type(v["_data_"]) is str:
                    state[k] = fast[v["_type_"]](v["_data_"])
                else:
                    state[k] = self._walk(v)
            elif tv is list:
                for x in v:
                    tx = type(x)
                    if tx is dict or tx is list:
                        state[k] = self._walk(v)
                        break
        if len(state) == 2 and "_type_" in state and "_data_" in state:
            raise _Fallback  # the whole state a transcoded object: the mapper's path
        return state

    def _walk(self, value: Any) -> Any:
        """``JSONTranscoder._decode_obj`` applied to every JSON object, innermost first."""
        t = type(value)
        if t is dict:
            for k, v in value.items():
                tv = type(v)
                if tv is dict or tv is list:
                    value[k] = self._walk(v)
            if len(value) == 2 and "_type_" in value and "_data_" in value:
                return self.names[value["_type_"]].decode(value["_data_"])
            return value
        for i, v in enumerate(value):
            tv = type(v)
            if tv is dict or tv is list:
                value[i] = self._walk(v)
        return value
