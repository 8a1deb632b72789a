"""Structured answers that repair themselves: an answer that does not fit the request's
output schema is sent back to the model, with the validation error quoted, until one
fits or the tries run out (instructor's retry, on any client).

``repaired(turn, request, repair)`` runs ``turn`` (a coroutine from a request to a
:class:`~cuca.Completion`) once, then up to ``repair`` more times on the conversation
grown by the failed answer and a user message quoting its error. The first answer that
fits is returned, with every try in ``attempts`` (the first too, when it fits at
once: ``error`` ``None``) and the usage of all of them summed on
its response (so its ``cost`` is the cost of every try). After the last failure an
:class:`~cuca.OutputValidationError` carrying every attempt is raised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import attrs

from .errors import ConfigurationError, OutputValidationError
from .stream import Attempt, Completion
from .types import PromptCacheUsage, TokenUsage, UnifiedRequest

__all__ = ["feedback", "repaired", "sum_cache_usage", "sum_usage"]

RunTurn = Callable[[UnifiedRequest], Awaitable[Completion]]


async def repaired(turn: RunTurn, request: UnifiedRequest, repair: int) -> Completion:
    """The first answer to ``request`` that fits its output schema, in at most
    ``1 + repair`` turns (see the module)."""
    if repair < 0:
        raise ConfigurationError("repair is a number of retries: 0 or more")
    if repair and request.output_schema is None:
        raise ConfigurationError("repair= needs a request with an output schema")
    attempts: list[Attempt] = []
    while True:
        done = await turn(request)
        error = next((e for e in done.errors if isinstance(e, OutputValidationError)), None)
        attempts.append(Attempt(done.message, error, done.response))
        if not repair:
            return done
        if error is None:
            return summed(done, attempts)
        if len(attempts) > repair:
            raise OutputValidationError(
                f"no answer fit after {len(attempts)} tries; the last: {error.message}",
                error.raw,
                tuple(attempts),
            )
        request = request.add_message(done.message).add_user_message(feedback(error))


def feedback(error: OutputValidationError) -> str:
    """The user message that sends a failed answer's error back to the model."""
    return (
        f"Your answer does not fit the required JSON Schema: {error.message}. "
        "Answer again with only the corrected JSON."
    )


def summed(done: Completion, attempts: list[Attempt]) -> Completion:
    """``done`` with every attempt, its response carrying the usage of all of them."""
    responses = [a.response for a in attempts]
    response = attrs.evolve(
        done.response,
        usage=sum_usage(r.usage for r in responses),
        prompt_cache_usage=sum_cache_usage(r.prompt_cache_usage for r in responses),
        counted_usage=sum_usage(r.counted_usage for r in responses),
    )
    errors = tuple(e for e in done.errors if not isinstance(e, OutputValidationError))
    return attrs.evolve(done, response=response, errors=errors, attempts=tuple(attempts))


def sum_usage(usages: Iterable[TokenUsage | None]) -> TokenUsage | None:
    """The sum of the usages that were reported (``None`` if none was);
    ``reasoning_tokens`` stays ``None`` unless some turn reported it."""
    known = [u for u in usages if u is not None]
    if not known:
        return None
    reasoning = [u.reasoning_tokens for u in known if u.reasoning_tokens is not None]
    return TokenUsage(
        sum(u.prompt_tokens for u in known),
        sum(u.completion_tokens for u in known),
        sum(reasoning) if reasoning else None,
    )


def sum_cache_usage(usages: Iterable[PromptCacheUsage | None]) -> PromptCacheUsage | None:
    """The sum of the prompt-cache usages that were reported (``None`` if none was)."""
    known = [u for u in usages if u is not None]
    if not known:
        return None
    return PromptCacheUsage(sum(u.read_tokens for u in known), sum(u.write_tokens for u in known))
