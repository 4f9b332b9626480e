"""The server process's heap after start-up (ADR-0041).

Why: a long-running server holds ~100k objects that never die — modules, pydantic models,
pools, caches. CPython's full (generation-2) collection walks all of them every time enough
new objects survived, and the request that happens to trigger it waits: at 100k facts it was
one retrieve in ~50, paused by tens of milliseconds (more under load). ``gc.freeze()`` moves
everything alive at the end of start-up into a permanent generation that collections skip;
garbage made later is still collected as before. Only the server's own process does this —
a library must not change its host application's collector.
"""

from __future__ import annotations

import gc


def settle() -> int:
    """Collect what start-up left behind, then freeze the survivors; returns how many objects
    the collector will no longer walk."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
