"""Declaring which method handles which event class, once, at the method.

``@handles(AgentMemory.FactAdded)`` on a method of a projector or a bulk fold registers it for
that event class (the same idea as eventsourcing's ``@singledispatchmethod`` projections). The
registry maps event classes to method NAMES, resolved per instance: a subclass that overrides
``_fact_confirmed`` (tests inject failures that way) is called instead of the base method,
which a registry of function objects (``singledispatchmethod``) would silently skip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
_MARKED: dict[Any, tuple[type, ...]] = {}  # handler function -> the event classes it handles


def handles(*event_classes: type) -> Callable[[F], F]:
    """Mark a method as the handler of ``event_classes`` (exact classes, as stored)."""

    def mark(method: F) -> F:
        _MARKED[method] = event_classes
        return method

    return mark


class EventHandlers:
    """Mixin: collects ``@handles`` methods of the class and its bases."""

    handler_names: ClassVar[dict[type, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names: dict[type, str] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if callable(value) and value in _MARKED:
                    for event_class in _MARKED[value]:
                        names[event_class] = name
        cls.handler_names = names

    def bound_handlers(self) -> dict[type, Callable[..., None]]:
        """Event class -> bound method (looked up by name: overrides win)."""
        return {cls: getattr(self, name) for cls, name in self.handler_names.items()}
