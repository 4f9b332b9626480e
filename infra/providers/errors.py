"""Provider exceptions and the retry loop shared by the OpenAI-compatible providers.

Why a loop of our own instead of the ``openai`` client's ``max_retries``: the services need
one exception vocabulary (``ProviderError`` and subclasses) whatever the endpoint, and the
tests need to drive the backoff without sleeping (``sleep`` is injectable).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import openai

T = TypeVar("T")


class ProviderError(RuntimeError):
    """A provider call failed for good (after retries, or on a non-retryable error)."""


class ProviderOutage(ProviderError):
    """The endpoint was unreachable or overloaded through every retry: connection refused,
    timeouts, 429, 5xx. Transient: the same request may succeed later, so the write pipeline
    defers the extraction (ADR-0014) instead of recording an empty one."""


class ProviderTimeout(ProviderOutage):
    """The last attempt timed out (client-side timeout or connection timeout)."""


class ProviderRateLimited(ProviderOutage):
    """The endpoint kept answering 429 until the retries ran out."""


class ProviderBadResponse(ProviderError):
    """The endpoint answered 2xx but without usable content (refusal, empty choices...)."""


class ProviderTruncated(ProviderBadResponse):
    """The answer was cut at ``max_tokens`` (``finish_reason == "length"``).

    Raised rather than returned because a cut answer is not the answer: a caller parsing it
    would at best fail on broken JSON, at worst accept a valid-looking prefix (a list that
    ends early). Not retried: the same request would be cut the same way. The partial text
    is kept in ``partial_output`` so a caller can record it (no model output is lost).
    """

    def __init__(self, message: str, partial_output: str) -> None:
        super().__init__(message)
        self.partial_output = partial_output


class ProviderUnavailable(ProviderError):
    """The provider cannot be built here: a missing optional package or model file."""


def _is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
        return True  # APITimeoutError subclasses APIConnectionError; both are transient
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return False


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from a ``Retry-After`` header of a 429/503, if the server sent one."""
    if not isinstance(exc, openai.APIStatusError):
        return None
    value = exc.response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _final_error(exc: BaseException, what: str, attempts: int) -> ProviderError:
    detail = f"{what} failed after {attempts} attempt(s): {type(exc).__name__}: {exc}"
    if isinstance(exc, openai.APITimeoutError):
        return ProviderTimeout(detail)
    if isinstance(exc, openai.APIStatusError) and exc.status_code == 429:
        return ProviderRateLimited(detail)
    if _is_retryable(exc):
        return ProviderOutage(detail)
    return ProviderError(detail)


def is_transient(exc: BaseException) -> bool:
    """Whether an LLM call's failure is an outage worth retrying later (not a bad answer).

    Transient: ``ProviderOutage`` (and its subclasses), our own ``TimeoutError`` from
    ``call_with_timeout``, a raw ``openai`` connection/429/5xx error from a provider that does
    not wrap them, and OS-level connection errors. Everything else — a 400, a refusal, a cut
    or malformed answer — would fail the same way again, so it is not.
    """
    if isinstance(exc, (ProviderOutage, TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, ProviderError):
        return False
    return _is_retryable(exc)


def call_with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    max_retries: int,
    backoff_base: float,
    backoff_max: float,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``fn``; on 429/5xx/timeout/connection errors retry up to ``max_retries`` times.

    The delay before retry ``k`` (0-based) is ``min(backoff_max, backoff_base * 2**k)``, or the
    server's ``Retry-After`` if that is given (capped by ``backoff_max``). No jitter: the
    callers are few and the delays must be predictable in tests.
    """
    attempt = 0
    while True:
        try:
            return fn()
        except openai.OpenAIError as exc:
            if not _is_retryable(exc) or attempt >= max_retries:
                raise _final_error(exc, what, attempt + 1) from exc
            delay = _retry_after(exc)
            if delay is None:
                delay = backoff_base * (2**attempt)
            sleep(min(backoff_max, delay))
            attempt += 1
