"""Read model ``memory``: what the agent knows — facts (bi-temporal), entities, aliases,
relationships, fact<->entity links — and the audit of refused decisions.

One read model, not one per table group: ``EntitiesMerged`` rewrites facts, links, aliases and
relationships together, so they must share one transaction and one tracking position. It is a
package because its tables, projector and bulk fold together exceed one module's size.
"""

from __future__ import annotations

from engramdb.projections.read_model import ReadModel
from engramdb.projections.read_models.memory.fold import MemoryFold
from engramdb.projections.read_models.memory.view import MemoryView

READ_MODEL = ReadModel(MemoryView, MemoryFold)

__all__ = ["READ_MODEL", "MemoryFold", "MemoryView"]
