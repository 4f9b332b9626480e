"""Which OpenAI-compatible endpoint and model each LLM operation uses (issue 25, ADR-0052).

Five operations call an LLM: ``extraction`` (the write pipeline's one call per message, which
also proposes the ADD / UPDATE / NOOP that reconciliation decides on — reconciliation itself
makes no call), ``resolution`` (a name in the ambiguous band), ``rerank`` (the read path's
judge), ``consolidation`` (the jobs' pattern review) and ``profiles`` (the jobs' entity
profiles). Each may name its own ``ENGRAMDB_LLM_<OP>_{MODEL,BASE_URL,API_KEY,TIMEOUT_SEC}``;
every one left unset is the global ``ENGRAMDB_LLM_*`` — so a deployment that sets none runs
exactly as before, one model for everything.

Why the key does not always fall back: a key belongs to its endpoint. An operation with a
base URL of its own (another host) does not inherit the global key — sending the OpenAI key
to a local server, or to another vendor, is a leak, not a default. It gets its own key or
none (a local server needs none, as for the global settings).

Why errors at start-up: a per-operation setting that can never take effect (the operation has
no endpoint at all) or a per-operation base URL that is no http(s) URL would otherwise be
discovered at the first call, or never. (The global base URL is not checked: it was accepted
as is before, and docker-compose passes it through a ``${...}`` default.) Pure: reads a settings object, imports no provider.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

#: the operations that call an LLM, in pipeline order
OPERATIONS = ("extraction", "resolution", "rerank", "consolidation", "profiles")
#: what each operation may set for itself (``llm_<op>_<part>``)
PARTS = ("model", "base_url", "api_key", "timeout_sec")
#: the ``openai`` client's endpoint when no base URL is set
DEFAULT_HOST = "api.openai.com"


@dataclass(frozen=True)
class LLMRoute:
    """One operation's endpoint. ``own``: the parts set for this operation (the rest are the
    global settings). The key is never shown (``repr``, ``describe``)."""

    operation: str
    model: str
    base_url: str | None
    api_key: str | None = field(repr=False)
    timeout_sec: float
    max_retries: int
    own: tuple[str, ...] = ()

    @property
    def pool_key(self) -> tuple[Any, ...]:
        """Operations with equal keys share one provider (one HTTP connection pool)."""
        return (self.base_url, self.api_key, self.model, self.timeout_sec, self.max_retries)

    @property
    def host(self) -> str:
        return endpoint_host(self.base_url)


def env_name(operation: str | None, part: str) -> str:
    """``ENGRAMDB_LLM_RERANK_MODEL`` (``operation=None``: the global ``ENGRAMDB_LLM_MODEL``)."""
    middle = f"{operation.upper()}_" if operation else ""
    return f"ENGRAMDB_LLM_{middle}{part.upper()}"


def endpoint_host(base_url: str | None) -> str:
    """``host[:port]`` of an endpoint — what ``status`` shows (never a path, user or key)."""
    if not base_url:
        return DEFAULT_HOST
    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    return f"{host}:{parts.port}" if parts.port else host


def check_base_url(name: str, url: str | None) -> None:
    if url is None:
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{name} must be an http(s) URL such as http://127.0.0.1:8000/v1, "
                         f"got {url!r}")


def resolve_routes(settings: Any) -> dict[str, LLMRoute | None]:
    """Each operation's route (``None``: that operation has no LLM, as with no settings at
    all). Raises ``ValueError`` naming the variables when a setting cannot take effect."""
    routes: dict[str, LLMRoute | None] = {}
    for op in OPERATIONS:
        own = {p: getattr(settings, f"llm_{op}_{p}") for p in PARTS}
        set_parts = tuple(p for p in PARTS if own[p] is not None)
        check_base_url(env_name(op, "base_url"), own["base_url"])
        base_url = own["base_url"] if own["base_url"] is not None else settings.llm_base_url
        if own["api_key"] is not None:
            api_key = own["api_key"]
        elif own["base_url"] is not None and own["base_url"] != settings.llm_base_url:
            api_key = None  # another endpoint: the global key is not sent there
        else:
            api_key = settings.llm_api_key
        if not api_key and not base_url:
            if set_parts:
                names = ", ".join(env_name(op, p) for p in set_parts)
                raise ValueError(
                    f"{names} set, but {op} has no LLM endpoint: set {env_name(op, 'base_url')} "
                    f"or {env_name(op, 'api_key')} (or the global ENGRAMDB_LLM_BASE_URL / "
                    "ENGRAMDB_LLM_API_KEY), or unset them")
            routes[op] = None
            continue
        routes[op] = LLMRoute(
            operation=op,
            model=own["model"] if own["model"] is not None else settings.llm_model,
            base_url=base_url,
            api_key=api_key,
            timeout_sec=own["timeout_sec"] if own["timeout_sec"] is not None
            else settings.llm_timeout_sec,
            max_retries=settings.llm_max_retries,
            own=set_parts,
        )
    return routes
