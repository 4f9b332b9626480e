"""Run a bench function from exported sources in a spawned child (``bench.rebuild.run
--baseline DIR``): before/after figures of a change in one invocation.

Why a module of its own: a spawned child gets the parent's ``sys.path`` and unpickles its
target by importing the target's module; this one imports nothing of ``engramdb``, so the
child can put ``DIR`` first and import ``engramdb`` and ``bench`` from there.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any


def run(code: str, module: str, function: str, *args: Any) -> None:
    from eventsourcing.utils import clear_topic_cache

    sys.path.insert(0, code)
    for name in list(sys.modules):
        if name.split(".")[0] in ("bench", "engramdb"):
            del sys.modules[name]
    # the spawn already imported the worktree's event classes (the parent's ``__main__``):
    # eventsourcing refuses to register the exported ones under the same topics otherwise
    clear_topic_cache()
    getattr(importlib.import_module(module), function)(*args)
