"""``LLMProvider`` over any OpenAI-compatible chat-completions endpoint (docs/spec.md §5).

One class serves OpenAI itself and local servers (vLLM, llama.cpp, Ollama...) through
``base_url``. Retries are ours (see ``errors.call_with_retries``) so that the services see a
single exception vocabulary and the tests can drive the backoff without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import openai

from engramdb.infra.providers.errors import (
    ProviderBadResponse,
    ProviderTruncated,
    call_with_retries,
)

#: Placeholder key for local endpoints that ignore authentication; the ``openai`` client
#: refuses to start without one.
NO_KEY = "not-needed"


class OpenAILLM:
    """Chat completions; returns the assistant text of the first choice.

    ``response_format`` is forwarded verbatim (e.g. ``{"type": "json_schema", "json_schema":
    {...}}``) - validating the JSON is the caller's job, because only it knows the schema.
    An answer cut at ``max_tokens`` (``finish_reason == "length"``) raises
    :class:`ProviderTruncated` carrying the partial text.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
        max_tokens_param: str = "max_tokens",
        name: str | None = None,
        client: openai.OpenAI | None = None,
    ) -> None:
        self.model = model
        self.name = name or f"openai:{model}"
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._sleep = sleep
        # Newer OpenAI reasoning models want "max_completion_tokens"; most compatible
        # servers only know "max_tokens".
        self.max_tokens_param = max_tokens_param
        #: called with each answer's token usage (``prompt_tokens``, ``completion_tokens``,
        #: ``finish_reason``) when set: how a benchmark measures a call's cost
        self.on_usage: Callable[[dict[str, Any]], None] | None = None
        self._client = client or openai.OpenAI(
            api_key=api_key or NO_KEY,
            base_url=base_url or None,  # "" is unset, not a URL (compose passes "")
            timeout=timeout,
            max_retries=0,  # our loop retries
        )

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> str:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": temperature,
        }
        if response_format is not None:
            kwargs["response_format"] = response_format
        if max_tokens is not None:
            kwargs[self.max_tokens_param] = max_tokens

        response = call_with_retries(
            lambda: self._client.chat.completions.create(**kwargs),
            what=f"{self.name} chat completion",
            max_retries=self.max_retries,
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
            sleep=self._sleep,
        )
        if not response.choices:
            raise ProviderBadResponse(f"{self.name}: response has no choices")
        choice = response.choices[0]
        message = choice.message
        if self.on_usage is not None:  # benchmarks count tokens (issue 26); never required
            usage = getattr(response, "usage", None)
            self.on_usage({
                "prompt_tokens": getattr(usage, "prompt_tokens", None),
                "completion_tokens": getattr(usage, "completion_tokens", None),
                "finish_reason": choice.finish_reason,
            })
        if choice.finish_reason == "length":
            raise ProviderTruncated(
                f"{self.name}: answer cut at max_tokens={max_tokens} (finish_reason=length)",
                message.content or "",
            )
        if message.content is None:
            refusal = getattr(message, "refusal", None)
            raise ProviderBadResponse(f"{self.name}: no content (refusal={refusal!r})")
        return message.content
