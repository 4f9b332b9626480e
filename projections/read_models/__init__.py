"""The registry: every read model, in the order they are set up, run and rebuilt.

Adding a read model is one new module here (``docs/read-models.md``) and one line below.
Nothing else lists read models: schema DDL (``projections.schema``), the runners and their
``wait`` (``projections.runner``) and rebuild (``projections.rebuild``) all iterate this.
"""

from __future__ import annotations

from collections.abc import Sequence

from engramdb.projections.read_model import ReadModel
from engramdb.projections.read_models import conversation, memory

# ``mem_patterns`` (``read_models.patterns``) belongs to ``memory`` since its job events
# exist (ADR-0019)
READ_MODELS: tuple[ReadModel, ...] = (
    conversation.READ_MODEL,
    memory.READ_MODEL,
)

BY_NAME: dict[str, ReadModel] = {rm.name: rm for rm in READ_MODELS}
# read models with a projector (and a tracking table): what ``wait(position)`` waits for
PROJECTION_NAMES: tuple[str, ...] = tuple(rm.name for rm in READ_MODELS if rm.projected)


def select(names: str | Sequence[str] | None) -> tuple[ReadModel, ...]:
    """The read models called ``names`` (one name, several, or None = all of them)."""
    if names is None:
        return READ_MODELS
    wanted = (names,) if isinstance(names, str) else tuple(names)
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown read model(s) {unknown}; known: {tuple(BY_NAME)}")
    return tuple(BY_NAME[n] for n in wanted)
