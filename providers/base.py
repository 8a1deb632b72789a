"""The contract between the turn pipeline and a provider adapter.

An adapter owns one wire shape. It turns a :class:`~cuca.types.UnifiedRequest` into an
:class:`HttpRequest` (``encode``), chooses how the response bytes are framed
(``new_framer``, server-sent events by default) and translates frames into blocks with a
stateful, I/O-free :class:`StreamDecoder`. Nothing outside ``providers/`` sees vendor JSON.
"""

from __future__ import annotations

import abc
import functools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from cuca.batch_wire import Answer, BatchWire
from cuca.errors import (
    ConfigurationError,
    CucaError,
    HttpContextOverflowError,
    HttpStatusError,
    ProviderError,
    http_status_error,
)
from cuca.stages.framing import JSON_BODY, JsonOrSse
from cuca.stages.protocols import Framer, StreamDecoder
from cuca.stages.sse import SseEvent, SseParser
from cuca.turn import Item, RateLimitHint
from cuca.types import (
    ModelInfo,
    OutputSchema,
    ProviderEndpoint,
    TokenCount,
    UnifiedRequest,
)
from cuca.vectors import EmbeddingRoute

from .decoding import Overflow, loads_json, stream_error
from .overflow import any_overflow

__all__ = [
    "JSON_BODY",
    "SECRET_HEADERS",
    "ClientSettings",
    "Framer",
    "HttpRequest",
    "Item",
    "ProviderAdapter",
    "Send",
    "StreamDecoder",
    "guarded_feed",
    "is_secret_header",
    "loads_json",
    "with_headers",
]

Send: TypeAlias = Callable[["HttpRequest"], Awaitable[Any]]
"""How an adapter asks its server something outside a turn (counting tokens, reading a
window): the client sends the request and returns the 2xx answer's JSON, or raises the
adapter's :meth:`ProviderAdapter.status_error` for any other status."""

SECRET_HEADERS = frozenset({"authorization", "x-api-key", "x-goog-api-key", "api-key"})
"""The auth headers adapters send a key in."""


def is_secret_header(name: str) -> bool:
    """Whether a header's name says it holds a secret: an auth header, or a name ending
    in ``-key``, ``-token`` or ``-secret`` (``_`` too), ``cookie`` or ``*-authorization``.
    Its value is never shown."""
    lowered = name.lower().replace("_", "-")
    return (
        lowered in SECRET_HEADERS
        or lowered.endswith(("-key", "-token", "-secret", "-authorization"))
        or lowered in ("cookie", "proxy-authorization")
    )


def _redacted(headers: Mapping[str, str]) -> str:
    shown = {k: ("<redacted>" if is_secret_header(k) else v) for k, v in headers.items()}
    return repr(shown)


def with_headers(wire: HttpRequest, extra: Mapping[str, str]) -> HttpRequest:
    """``wire`` with the user's ``extra`` headers added. One the adapter already sets is
    a ``ConfigurationError``, never replaced silently: the auth header above all."""
    if not extra:
        return wire
    have = {name.lower() for name in wire.headers}
    for name in extra:
        if name.lower() not in have:
            continue
        if name.lower() in SECRET_HEADERS:
            raise ConfigurationError(
                f"the extra header {name!r} would replace the auth header sent for the "
                'client\'s API key: pass the key as api_key=, or api_key="" to send your own'
            )
        raise ConfigurationError(
            f"the extra header {name!r} is one the adapter sets itself: cuca does not "
            "replace it (see the provider's page for the option that sets it)"
        )
    return attrs.evolve(wire, headers={**wire.headers, **extra})


@attrs.frozen
class HttpRequest:
    """What the transport sends: method, URL, headers and a JSON body.

    ``repr`` never shows the values of auth headers.
    """

    url: str
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=_redacted, hash=False)
    body: Any = attrs.field(default=None, hash=False)
    method: str = "POST"

    def body_bytes(self) -> bytes:
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode()


@attrs.frozen
class ClientSettings:
    """What a client knows that an adapter may need: the endpoint, the base URL and key
    given to the client (either may be ``None``), and an optional provider-specific
    configuration object (``LlamaCppConfig``, ``AnthropicConfig``...)."""

    provider: ProviderEndpoint
    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    provider_config: Any = None

    def url(self) -> str:
        """The base URL to use: the client's, else the endpoint's default from the
        provider table, without a trailing slash."""
        from .table import endpoint_info

        info = endpoint_info(self.provider.kind)
        default = info.base_url if info is not None else None
        base = self.base_url or default
        if base is None:
            raise ConfigurationError(f"{self.provider} needs a base_url")
        return base.rstrip("/")


class ProviderAdapter(abc.ABC):
    """One wire shape, configured for one provider."""

    endpoint: ProviderEndpoint

    @abc.abstractmethod
    def encode(self, request: UnifiedRequest) -> HttpRequest:
        """The HTTP request for ``request``; raises ``ConfigurationError`` if it cannot
        be sent (a missing key, a budget above max_tokens...)."""

    @abc.abstractmethod
    def new_decoder(self, request: UnifiedRequest) -> StreamDecoder:
        """A fresh decoder for the response to ``request``."""

    def new_framer(self) -> Framer:
        """How the response body is split into events: server-sent events by default,
        or one event holding a whole JSON body (a non-streamed turn)."""
        return JsonOrSse(SseParser())

    def error_message(self, status: int, body: str) -> str | None:
        """The vendor's own error text inside a non-2xx ``body``, if it can be found."""
        return None

    def overflow(self, status: int, body: str) -> Overflow | None:
        """Whether a non-2xx ``body`` says the request is longer than the model's window
        (see :mod:`~cuca.providers.overflow`); ``None`` for any other error."""
        return None

    def status_error(
        self, status: int, body: str, retry_after: float | None = None
    ) -> HttpStatusError:
        """The error a non-2xx answer raises: :class:`HttpContextOverflowError` when the
        vendor says the prompt does not fit, else the most specific
        :class:`HttpStatusError` for the status, with the vendor's message."""
        message = self.error_message(status, body)
        found = self.overflow(status, body) if 400 <= status < 500 else None
        if found is not None:
            return HttpContextOverflowError(
                status, body, message, limit=found.limit, requested=found.requested
            )
        return http_status_error(status, body, message, retry_after)

    def rate_limits(self, headers: Sequence[tuple[str, str]]) -> RateLimitHint | None:
        """What an answer's ``headers`` say about the server's rate limits (``None``:
        nothing), for the turn's gates: ``Retry-After`` here; a wire whose vendor sends
        rate-limit headers reads them too (:mod:`~cuca.providers.ratelimit`)."""
        from .headers import read_hint

        return read_hint(headers, ())

    async def count_tokens(self, request: UnifiedRequest, send: Send) -> TokenCount:
        """The prompt tokens of ``request`` as this vendor would count them, asking the
        server through ``send`` where it has a counting route."""
        raise ConfigurationError(f"{self.endpoint} has no way to count tokens before sending")

    async def model_info(self, model: str, send: Send) -> ModelInfo | None:
        """What the server says of ``model``'s window, or ``None`` when it has no route
        for it (the client then looks the model up in genai-prices' data)."""
        return None

    def whole_answer(self, request: UnifiedRequest, body: str) -> Answer:
        """One whole JSON response to ``request`` (a batch job's answer) decoded as a
        non-streamed turn's is: by this wire's own decoder, through its whole-response
        reading (:mod:`~cuca.providers.whole_response`)."""
        decoder = self.new_decoder(request.set_stream(False))
        items = decoder.feed(SseEvent(body, JSON_BODY))
        items += decoder.close()
        return Answer(tuple(items), decoder.summary())

    def embedding_route(self) -> EmbeddingRoute:
        """This wire's embedding route (``providers/<wire>/embeddings.py``) for the
        server it speaks to; a ``ConfigurationError`` where the server has none."""
        raise ConfigurationError(
            f"{self.endpoint} has no embedding route: embeddings run on OpenAI, vLLM, "
            "LM Studio, llama.cpp, Gemini and the local engine"
        )

    def batch_wire(self) -> BatchWire:
        """This wire's batch format (``providers/<wire>/batch.py``), for the server it
        speaks to; a ``ConfigurationError`` where the server has none."""
        raise ConfigurationError(
            f"{self.endpoint} has no batch API: batches run on OpenAI, Anthropic, Gemini "
            "and the local engine"
        )


FeedMethod = Callable[[Any, SseEvent], list[Item]]


def guarded_feed(provider: str) -> Callable[[FeedMethod], FeedMethod]:
    """Make a decoder's ``feed`` turn a frame of the wrong shape into a ``ProviderError``.

    Vendor JSON is untrusted: a frame that parses but holds a list where an object
    belongs must end the turn with a typed error that shows the frame, never with a
    ``TypeError`` from deep inside the decoder.
    """

    def wrap(feed: FeedMethod) -> FeedMethod:
        @functools.wraps(feed)
        def guarded(self: Any, event: SseEvent) -> list[Item]:
            if event.event == JSON_BODY:
                raise _not_streamed(str(getattr(self, "provider", provider)), event.data)
            try:
                return feed(self, event)
            except CucaError:
                raise
            except (
                TypeError,
                AttributeError,
                KeyError,
                IndexError,
                ValueError,
                RecursionError,
            ) as exc:
                frame = event.data[:200]
                message = f"unusable frame ({type(exc).__name__}: {exc}): {frame}"
                raise ProviderError(str(getattr(self, "provider", provider)), message) from exc

        return guarded

    return wrap


def _not_streamed(provider: str, body: str) -> CucaError:
    """A streamed request answered with one JSON document: the vendor's error, of its
    kind (:func:`.decoding.stream_error`), when the document is an error, else what
    happened and what to do."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        document = None
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return stream_error(provider, error["message"], error, body, any_overflow)
    if isinstance(error, str):
        return ProviderError(provider, error)
    return ProviderError(
        provider,
        "the server answered a streamed request with one JSON document; for a server "
        f"that does not stream, use request.set_stream(False): {body[:200]}",
    )


def refuse(provider: str, spec: OutputSchema | None) -> None:
    """A ``ConfigurationError``, before any byte is sent, when a backend that cannot
    constrain its answer gets a request with an output schema."""
    if spec is not None:
        raise ConfigurationError(
            f"{provider} cannot constrain its answer to a JSON Schema (output schema "
            f"{spec.name!r}): remove it with set_output_schema(None) or use another backend"
        )
