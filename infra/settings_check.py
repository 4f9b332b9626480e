"""``ENGRAMDB_*`` variables that are no setting: a typo must not silently mean "embedded".

Why: ``Settings`` ignores variables it does not know (``extra="ignore"``, so unrelated
tooling can share the prefix), so ``ENGRAMDB_DATABSE_URL=postgresql://...`` started the
embedded database and wrote to it as if nothing were wrong. The commands warn once, on
stderr, with the closest real name (ADR-0050).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from engramdb.infra.settings import Settings

PREFIX = "ENGRAMDB_"
# read outside Settings, on purpose: two embedded-server knobs
OTHER_KNOWN = frozenset({
    "ENGRAMDB_MINILM_TOKENIZER",  # infra/providers/offline_embeddings.py
    "ENGRAMDB_PG_SYSTEM_USER",  # infra/embedded_pg_user.py
})
#: the test suite's and the benchmarks' own knobs (ENGRAMDB_TEST_DATABASE_URL, ...): CI
#: exports some of them to every command it runs, so they must never draw a warning
HARNESS_PREFIXES = ("ENGRAMDB_TEST_", "ENGRAMDB_BENCH_")
#: an operation without a model of its own (issue 25 lists it; ``infra/llm_routes.py``)
NO_OWN_LLM = "ENGRAMDB_LLM_RECONCILIATION_"


def known_variables() -> frozenset[str]:
    return frozenset(f"{PREFIX}{name.upper()}" for name in Settings.model_fields) | OTHER_KNOWN


def _is_unknown(name: str, known: frozenset[str]) -> bool:
    upper = name.upper()
    return upper.startswith(PREFIX) and name not in known and not upper.startswith(HARNESS_PREFIXES)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One warning line per ``ENGRAMDB_*`` name that nothing reads, with a "did you mean"."""
    known = known_variables()
    lines = []
    for name in sorted(n for n in environ if _is_unknown(n, known)):
        close = difflib.get_close_matches(name.upper(), sorted(known), n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        if name.upper().startswith(NO_OWN_LLM):
            hint = (" (reconciliation makes no LLM call: the extraction model proposes ADD / "
                    "UPDATE / NOOP, so set ENGRAMDB_LLM_EXTRACTION_* instead; ADR-0052)")
        lines.append(f"warning: {name} is not an engramdb setting{hint}; it is ignored")
    return lines
