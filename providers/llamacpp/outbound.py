"""A turn as llama-server's native ``/completion`` route writes it: one frame per
piece of text (:class:`CompletionStream`), or one object for ``stream: false``
(:func:`completion`).

``cuca serve`` does not answer this route; ``cuca.testing``'s scripted replies do, in
the shape of llama-server's own frames (``reference/wire.md`` section 7):

- ``data: {"index": 0, "content", "tokens": [], "stop": false, "id_slot": 0,
  "tokens_predicted", "tokens_evaluated"}`` for each piece of text, counted one token
  a piece.
- The route carries text only: a Thinking item, a tool call or an image has no place
  in its frames and is not written (the client side reads the route as text).
- The last frame has ``content: ""``, ``stop: true``, the model, the counts,
  ``stop_type`` (``limit`` for a cut by ``n_predict``, else ``eos``) and ``timings``
  (the prompt's tokens read from the cache and evaluated, the tokens predicted; a
  script has no clock, so its milliseconds are 0). There is no ``[DONE]``: the stream
  ends with that frame.
- An error is ``{"error": {"code", "message", "type"}}``, as a frame inside the stream
  or as the body of an error status.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cuca.errors import CucaError
from cuca.types import Text

from ..serving import Ending, ErrorKind, Item, error_kind, finish_kind, sse

__all__ = ["CompletionStream", "completion", "error_body", "error_object"]

ERROR_TYPES: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "request_too_large": "invalid_request_error",
    "rate_limit": "unavailable_error",
    "timeout": "server_error",
    "overloaded": "unavailable_error",
    "server": "server_error",
}
"""llama-server's ``error.type`` of each kind of error."""


class CompletionStream:
    """Writes one turn as ``/completion`` frames.

    Call :meth:`open` once (with the prompt's tokens when known), :meth:`write` for each
    item, then :meth:`close` with how the turn ended, or :meth:`fail` with the error
    that ended it; each returns the bytes to send, as the other wires' streams do.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.prompt = 0
        self.predicted = 0
        self.done = False

    def _frame(self, content: str, stop: bool) -> dict[str, Any]:
        return {
            "index": 0,
            "content": content,
            "tokens": [],
            "stop": stop,
            "id_slot": 0,
            "tokens_predicted": self.predicted,
            "tokens_evaluated": self.prompt,
        }

    def open(self, input_tokens: int | None = None) -> bytes:
        """Nothing is sent before the first piece; the prompt's count rides on every
        frame."""
        self.prompt = input_tokens or 0
        return b""

    def write(self, item: Item) -> bytes:
        """The frame of a piece of text (nothing for anything else)."""
        if self.done or not isinstance(item, Text) or not item.text:
            return b""
        self.predicted += 1
        return sse(self._frame(item.text, stop=False))

    def close(self, ending: Ending) -> bytes:
        """The last frame: empty content, ``stop: true``, the counts and why."""
        if self.done:
            return b""
        self.done = True
        return sse(_final(self._frame("", stop=True), ending, self.model))

    def fail(self, error: BaseException) -> bytes:
        """The error that ended the turn, as a frame."""
        if self.done:
            return b""
        self.done = True
        return sse(error_object(error))


def _final(frame: dict[str, Any], ending: Ending, model: str) -> dict[str, Any]:
    usage = ending.usage
    if usage is not None:
        frame["tokens_predicted"] = usage.completion_tokens
        frame["tokens_evaluated"] = usage.prompt_tokens
    cut = finish_kind(ending.finish_reason, False) == "length"
    cached = ending.prompt_cache_usage.read_tokens if ending.prompt_cache_usage else 0
    return {
        **frame,
        "model": model,
        "stop_type": "limit" if cut else "eos",
        "stopping_word": "",
        "tokens_cached": cached,
        "truncated": False,
        "timings": _timings(frame["tokens_evaluated"], cached, frame["tokens_predicted"]),
    }


def _timings(prompt: int, cached: int, predicted: int) -> dict[str, Any]:
    """llama-server's ``timings`` of a final frame: ``cache_n`` prompt tokens reused,
    ``prompt_n`` evaluated, ``predicted_n`` generated, and the times (0: not measured)."""
    return {
        "cache_n": cached,
        "prompt_n": max(prompt - cached, 0),
        "prompt_ms": 0.0,
        "prompt_per_token_ms": 0.0,
        "prompt_per_second": 0.0,
        "predicted_n": predicted,
        "predicted_ms": 0.0,
        "predicted_per_token_ms": 0.0,
        "predicted_per_second": 0.0,
    }


def error_object(error: BaseException, status: int | None = None) -> dict[str, Any]:
    """``{"error": {"code", "message", "type"}}`` for ``error``."""
    code, kind = error_kind(error, status)
    message = error.message if isinstance(error, CucaError) else str(error)
    return {"error": {"code": code, "message": message, "type": ERROR_TYPES[kind]}}


def error_body(error: BaseException, status: int | None = None) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of an error answered before any byte of a turn."""
    return error_kind(error, status)[0], error_object(error, status)


def completion(items: Iterable[Item], ending: Ending, model: str) -> dict[str, Any]:
    """The whole answer as one object (``stream: false``): all the text, ``stop: true``."""
    stream = CompletionStream(model)
    text = [item.text for item in items if isinstance(item, Text)]
    stream.predicted = len([t for t in text if t])
    return _final(stream._frame("".join(text), stop=True), ending, model)
