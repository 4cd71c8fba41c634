"""The chat model client: :class:`ChatClient` (cost metering, token log-probabilities, retries with tenacity,
an optional content-keyed cache, reviving a dead local server; blocking ``complete`` and awaited ``acomplete``), its
:class:`Completion` and :class:`TokenLogprob` results, redaction of API keys from error messages, and the builders of
``ChatOpenAI`` chat models from configs.

A local model's server is in :mod:`modular_rag.llama_server`; :mod:`modular_rag.providers` picks the chat model
for a config.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from modular_rag.config import LocalLLMConfig, OpenAILLMConfig
from modular_rag.errors import MissingDependencyError, ProviderError
from modular_rag.text import estimate_tokens
from modular_rag.trace import Deadline, current_deadline, record

__all__ = ["ChatClient", "Completion", "TokenLogprob"]


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-probability and the top alternatives."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Completion:
    """A chat completion: text, per-token log-probabilities (when the model gives them), token usage."""

    text: str
    tokens: tuple[TokenLogprob, ...] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


def _messages(prompt: str | Sequence[tuple[str, str]], system: str | None) -> list[tuple[str, str]]:
    msgs: list[tuple[str, str]] = [("system", system)] if system else []
    if isinstance(prompt, str):
        msgs.append(("human", prompt))
    else:
        msgs.extend((role, text) for role, text in prompt)
    return msgs


@dataclass
class _Request:
    """A completion about to be asked for: its messages, the model bound to its options, the step's deadline, its
    cache key, or the cached answer."""

    messages: list[tuple[str, str]]
    runnable: Any
    deadline: Deadline | None
    key: str | None
    hit: Completion | None


def _parse_logprobs(meta: dict[str, Any]) -> tuple[TokenLogprob, ...] | None:
    raw = meta.get("logprobs")
    content = raw.get("content") if isinstance(raw, dict) else None
    if not content:
        return None
    return tuple(
        TokenLogprob(
            token=item.get("token", ""),
            logprob=float(item.get("logprob", 0.0)),
            top=tuple((t.get("token", ""), float(t.get("logprob", 0.0))) for t in item.get("top_logprobs") or ()),
        )
        for item in content
    )


class ChatClient:
    """The flow's chat model with cost metering and optional token log-probabilities.

    Args:
        model: Any LangChain ``BaseChatModel``.
        openai_compatible: Whether the model accepts OpenAI request options (``logprobs``, ``max_tokens``,
            ``stop``) as bound keyword arguments.
        describe: A label for messages (never includes a key).
        prefill: Whether the server continues a final assistant message.
        logprobs: Whether to ask for token log-probabilities when an operator wants them.
        retries: Extra attempts for responses the HTTP client does not retry (malformed or empty bodies); HTTP
            429/5xx, timeouts and dropped connections are retried by the OpenAI client itself (``max_retries``).
        backoff_s: First wait between those attempts (doubling).
        revive: Called once when a request cannot connect: restarts a dead local server and returns why it died
            (then the request is sent again), or returns ``None``.
    """

    def __init__(
        self,
        model: Any,
        *,
        openai_compatible: bool,
        describe: str,
        prefill: bool = False,
        logprobs: bool = True,
        retries: int = 2,
        backoff_s: float = 0.5,
        revive: Callable[[], str | None] | None = None,
    ) -> None:
        self.model = model
        self.openai_compatible = openai_compatible
        self.describe = describe
        self.prefill = prefill
        self.logprobs = logprobs and openai_compatible
        self.cache: Any = None  # a KVCache, set by Providers when providers.cache.llm is on
        self.retries = retries
        self.backoff_s = backoff_s
        self.revive = revive
        self._bounded: Any = None

    def _invoke(self, runnable: Any, messages: list[tuple[str, str]]) -> Any:
        """Call the model; retry malformed or empty responses (which the HTTP client does not retry) with
        exponential backoff (tenacity), up to ``retries`` more times while the step's deadline allows; a failed
        connection to a local server revives it once and retries at once (not counted). Raise
        :class:`ProviderError` when it keeps failing."""
        from tenacity import Retrying

        retry, wait = self._policy(messages)
        try:
            return Retrying(retry=retry, wait=wait, reraise=True, sleep=time.sleep)(runnable.invoke, messages)
        except Exception as exc:
            raise ProviderError(f"{self.describe}: {type(exc).__name__}: {_redact(str(exc))}") from exc

    async def _ainvoke(self, runnable: Any, messages: list[tuple[str, str]]) -> Any:
        """:meth:`_invoke` awaited (the model's ``ainvoke``, tenacity's ``AsyncRetrying``): the same retries and
        metering; reviving a local server runs in a worker thread. Cancelled (the step's deadline), the call counts
        as sent (tenacity hands the cancellation to the retry decision, which records it and gives up)."""
        from tenacity import AsyncRetrying, RetryCallState

        retry, wait = self._policy(messages)

        async def aretry(state: RetryCallState) -> bool:
            if self.revive is not None:
                return await asyncio.to_thread(retry, state)  # may restart a local server: not on the loop
            return retry(state)

        try:
            return await AsyncRetrying(retry=aretry, wait=wait, reraise=True, sleep=asyncio.sleep)(
                runnable.ainvoke, messages
            )
        except Exception as exc:
            raise ProviderError(f"{self.describe}: {type(exc).__name__}: {_redact(str(exc))}") from exc

    def _policy(self, messages: list[tuple[str, str]]) -> tuple[Callable[[Any], bool], Callable[[Any], float]]:
        """The retry decision and the wait between attempts of one call (see :meth:`_invoke`)."""
        from tenacity import RetryCallState

        revived = False
        free = 0  # attempts that followed a revival: no backoff, not counted against `retries`
        revive_now = False

        def retry(state: RetryCallState) -> bool:
            nonlocal revived, free, revive_now
            assert state.outcome is not None
            exc = state.outcome.exception()
            if exc is None:
                return False
            record(llm_calls=1, prompt_tokens=sum(estimate_tokens(t) for _, t in messages))  # sent, if unanswered
            if not revived and self.revive is not None and _connection_failed(exc):
                revived = True
                reason = self.revive()
                if reason is not None:
                    from modular_rag.trace import note

                    note(f"llama-server restarted: {reason}")
                    free += 1
                    revive_now = True
                    return True
            deadline = current_deadline()
            spent = state.attempt_number - free
            return spent <= self.retries and _retryable(exc) and (deadline is None or not deadline.over)

        def wait(state: RetryCallState) -> float:
            nonlocal revive_now
            if revive_now:
                revive_now = False
                return 0.0
            return float(self.backoff_s * 2 ** (state.attempt_number - free - 1))

        return retry, wait

    def _bounded_model(self) -> Any:
        """The chat model without client-side retries, for calls under a deadline (an OpenAI client retries a
        timed-out request, which would run past the step's time); the model itself when it has no such client."""
        if self._bounded is None:
            root = getattr(self.model, "root_client", None)
            bounded = self.model
            if root is not None and hasattr(root, "with_options"):
                bounded = self.model.model_copy()
                bounded.root_client = root.with_options(max_retries=0)
                bounded.client = bounded.root_client.chat.completions
                root_async = getattr(self.model, "root_async_client", None)
                if root_async is not None and hasattr(root_async, "with_options"):
                    bounded.root_async_client = root_async.with_options(max_retries=0)
                    bounded.async_client = bounded.root_async_client.chat.completions
            self._bounded = bounded
        return self._bounded

    def next_token(
        self, prompt: str, prefix: str, *, system: str | None = None, top_logprobs: int = 10
    ) -> tuple[tuple[str, float], ...]:
        """The model's most likely next tokens after ``prefix`` (an assistant message it continues), with their
        log-probabilities. Needs a server that continues a final assistant message (``prefill``; llama-server does);
        an empty token means end of message.

        Raises:
            ProviderError: If the model does not continue assistant messages or returns no log-probabilities.
        """
        if not self.prefill:
            raise ProviderError(f"{self.describe} does not continue a partial assistant message (prefill)")
        messages = [*_messages(prompt, system), ("ai", prefix)] if prefix else _messages(prompt, system)
        completion = self.complete(messages, max_tokens=1, logprobs=True, top_logprobs=top_logprobs)
        if not completion.tokens:
            if completion.text == prefix or not completion.text:
                return (("", 0.0),)
            raise ProviderError(f"{self.describe} returned no token log-probabilities")
        return completion.tokens[0].top or ((completion.tokens[0].token, completion.tokens[0].logprob),)

    def complete(
        self,
        prompt: str | Sequence[tuple[str, str]],
        *,
        system: str | None = None,
        max_tokens: int | None = None,
        logprobs: bool = False,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> Completion:
        """One chat completion (one LLM call in the ledger, with the tokens the model reports).

        Args:
            prompt: User text, or ``(role, text)`` messages.
            system: A system message put first.
            max_tokens: Completion cap for this call (OpenAI-compatible models only).
            logprobs: Ask for token log-probabilities.
            top_logprobs: How many alternatives per token.
            stop: Stop sequences.

        Raises:
            ProviderError: If the model call fails after the provider's retries.
        """
        request = self._request(prompt, system, max_tokens, logprobs, top_logprobs, stop)
        if request.hit is not None:
            return request.hit
        if request.deadline is not None:
            with request.deadline.calling():
                message = self._invoke(request.runnable, request.messages)
        else:
            message = self._invoke(request.runnable, request.messages)
        return self._completion(request, message)

    async def acomplete(
        self,
        prompt: str | Sequence[tuple[str, str]],
        *,
        system: str | None = None,
        max_tokens: int | None = None,
        logprobs: bool = False,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> Completion:
        """:meth:`complete` awaited: the chat model's ``ainvoke``, holding no thread while the model answers; the same
        retries, deadline, cache and metering.

        Raises:
            ProviderError: If the model call fails after the provider's retries.
        """
        args = (prompt, system, max_tokens, logprobs, top_logprobs, stop)
        cached = self.cache is not None  # the cache is on disk: read and written in a worker thread, not on the loop
        request = await asyncio.to_thread(self._request, *args) if cached else self._request(*args)
        if request.hit is not None:
            return request.hit
        if request.deadline is not None:
            with request.deadline.calling():
                message = await self._ainvoke(request.runnable, request.messages)
        else:
            message = await self._ainvoke(request.runnable, request.messages)
        if cached:
            return await asyncio.to_thread(self._completion, request, message)
        return self._completion(request, message)

    def _request(
        self,
        prompt: str | Sequence[tuple[str, str]],
        system: str | None,
        max_tokens: int | None,
        logprobs: bool,
        top_logprobs: int,
        stop: Sequence[str] | None,
    ) -> _Request:
        """The request of one completion: the model bound to its options, under the step's deadline; a cache hit
        answers it."""
        messages = _messages(prompt, system)
        runnable = self.model
        kwargs: dict[str, Any] = {}
        deadline = current_deadline()
        if deadline is not None:
            if deadline.over:
                raise ProviderError(f"{self.describe}: not called: the step's {deadline.seconds:g}s ran out")
            if self.openai_compatible:  # the request ends at the deadline, and is not retried past it
                runnable = self._bounded_model()
                kwargs["timeout"] = deadline.remaining()
        if self.openai_compatible:
            if max_tokens is not None:
                kwargs["max_tokens"] = max_tokens
            if logprobs and self.logprobs:
                kwargs["logprobs"] = True
                if top_logprobs:
                    kwargs["top_logprobs"] = top_logprobs
            if stop:
                kwargs["stop"] = list(stop)
            if kwargs:
                runnable = runnable.bind(**kwargs)
        key = None
        if self.cache is not None:
            from modular_rag.cache import content_key

            identity = {k: v for k, v in kwargs.items() if k != "timeout"}
            key = content_key(self.describe, _model_identity(self.model), messages, identity)
            hit = self.cache.get("llm", key)
            if hit is not None:
                record(cache_hits=1)
                return _Request(messages, runnable, deadline, key, _completion_from(hit))
        return _Request(messages, runnable, deadline, key, None)

    def _completion(self, request: _Request, message: Any) -> Completion:
        """The model's message as a :class:`Completion`, metered and cached."""
        messages, key = request.messages, request.key
        text = message.content if isinstance(message.content, str) else _flatten(message.content)
        usage = getattr(message, "usage_metadata", None) or {}
        prompt_tokens = int(usage.get("input_tokens") or sum(estimate_tokens(t) for _, t in messages))
        completion_tokens = int(usage.get("output_tokens") or estimate_tokens(text))
        record(llm_calls=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        meta = dict(getattr(message, "response_metadata", {}) or {})
        completion = Completion(
            text, _parse_logprobs(meta), prompt_tokens, completion_tokens, {"finish": meta.get("finish_reason")}
        )
        if key is not None:
            self.cache.put("llm", key, _completion_to(completion))
        return completion


def _model_identity(model: Any) -> Any:
    """What determines a chat model's output besides the messages: its class and sampling settings."""
    fields = ("model_name", "model", "temperature", "max_tokens", "seed", "frequency_penalty", "top_p")
    return [type(model).__name__, {f: getattr(model, f, None) for f in fields}]


def _completion_to(c: Completion) -> dict[str, Any]:
    tokens = [[t.token, t.logprob, [list(x) for x in t.top]] for t in c.tokens] if c.tokens is not None else None
    return {
        "text": c.text,
        "tokens": tokens,
        "prompt": c.prompt_tokens,
        "completion": c.completion_tokens,
        "meta": c.meta,
    }


def _completion_from(d: dict[str, Any]) -> Completion:
    tokens = None
    if d.get("tokens") is not None:
        tokens = tuple(TokenLogprob(t, lp, tuple((a, b) for a, b in top)) for t, lp, top in d["tokens"])
    return Completion(d["text"], tokens, d["prompt"], d["completion"], d.get("meta") or {})


def _connection_failed(exc: BaseException) -> bool:
    """Whether a request failed to reach the server at all (refused or dropped connection; not a timeout)."""
    try:
        import openai
    except ImportError:  # pragma: no cover - langchain-openai depends on it
        return False
    return isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError)


def _retryable(exc: BaseException) -> bool:
    """Failures worth another attempt: malformed or empty bodies; not a refused request (4xx), which the same request
    would meet again, nor what the HTTP client already retried (429/5xx, timeouts, dropped connections)."""
    status = getattr(exc, "status_code", None)
    if status is not None:
        return False
    if type(exc).__name__ in {"APIConnectionError", "APITimeoutError"}:
        return False  # the OpenAI client already retried these max_retries times
    return isinstance(exc, ValueError) or type(exc).__name__ in {"APIResponseValidationError", "RemoteProtocolError"}


def _flatten(content: Any) -> str:
    parts = []
    for part in content:
        parts.append(part if isinstance(part, str) else str(part.get("text", "")))
    return "".join(parts)


def _redact(text: str) -> str:
    """Remove anything that looks like an API key from a message."""
    import re

    return re.sub(r"(sk-[A-Za-z0-9_\-]{6})[A-Za-z0-9_\-]+", r"\1…", text)


def _chat_openai(*, model: str, base_url: str | None, api_key: str, cfg: LocalLLMConfig | OpenAILLMConfig) -> Any:
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:  # pragma: no cover - core dependency
        raise MissingDependencyError(
            "the openai provider needs langchain-openai: pip install langchain-openai"
        ) from exc
    kwargs: dict[str, Any] = {}
    if cfg.seed is not None:
        kwargs["seed"] = cfg.seed
    if cfg.frequency_penalty:
        kwargs["frequency_penalty"] = cfg.frequency_penalty
    return ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=api_key,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
        timeout=cfg.timeout_s,
        max_retries=cfg.max_retries,
        **kwargs,
    )


def _build_openai_chat(cfg: OpenAILLMConfig) -> ChatClient:
    key = os.environ.get(cfg.api_key_env)
    base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL")
    if not key:
        if base_url is None:
            raise ProviderError(
                f"providers.llm: environment variable {cfg.api_key_env} is not set; set it, or give base_url "
                "for a keyless OpenAI-compatible server"
            )
        key = "no-key"
    model = _chat_openai(model=cfg.model, base_url=base_url, api_key=key, cfg=cfg)
    where = base_url or "api.openai.com"
    return ChatClient(
        model,
        openai_compatible=True,
        describe=f"openai-compatible {cfg.model} at {where}",
        prefill=cfg.prefill,
        logprobs=cfg.logprobs,
        retries=cfg.max_retries,
    )
