"""Structured answers that repair themselves: an answer that does not fit the output
schema goes back to the model with its error quoted, until one fits or the tries run
out; every try is kept with its usage, and the usage is summed. Over loopback on every
HTTP family, through generate and through the tool loop's last answer."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from support.wire_replies import FAMILIES, TEXT_FAMILIES, Family

from cuca import (
    ConfigurationError,
    CucaError,
    OutputValidationError,
    PromptCacheUsage,
    TokenUsage,
    ToolResult,
    UnifiedRequest,
)
from cuca.testing import open_replay_server


@attrs.frozen
class Forecast:
    city: str
    celsius: float = attrs.field(metadata={"json_schema": {"minimum": -90, "maximum": 60}})


REQUEST = UnifiedRequest.new("m").add_user_message("Weather in Paris?").set_output_schema(Forecast)
TOO_HOT = json.dumps({"city": "Paris", "celsius": 99})
FITS = json.dumps({"city": "Paris", "celsius": 18})
IDS = [f.name for f in FAMILIES]
TEXT_IDS = [f.name for f in TEXT_FAMILIES]


@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=TEXT_IDS)
async def test_repair_sends_the_error_back_and_keeps_the_answer_that_fits(family: Family) -> None:
    replies = [family.text_reply(TOO_HOT[:10], TOO_HOT[10:]), family.text_reply(FITS)]
    async with open_replay_server(replies) as server:
        async with family.client(server.url) as client:
            done = await client.generate(REQUEST, repair=2)
        second = server.requests[1].body.decode()
    assert done.parsed == Forecast("Paris", 18)
    assert done.errors == ()
    assert [a.message.text() for a in done.attempts] == [TOO_HOT, FITS]
    first_error = done.attempts[0].error
    assert first_error is not None and "99 is greater than the maximum of 60" in first_error.message
    assert done.attempts[1].error is None
    # the failed answer and the quoted error went back to the model
    assert "does not fit the required JSON Schema" in second
    assert "99 is greater than the maximum of 60" in second
    assert "Paris" in second and len(server.requests) == 2
    # summed: usage, or what the adapter counted where the server reports none (/completion)
    usage = [a.response.usage or a.response.counted_usage for a in done.attempts]
    total = done.response.usage or done.response.counted_usage
    assert usage[0] is not None and usage[1] is not None and total is not None
    assert total.prompt_tokens == usage[0].prompt_tokens + usage[1].prompt_tokens
    assert total.completion_tokens == usage[0].completion_tokens + usage[1].completion_tokens


@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=TEXT_IDS)
async def test_repair_first_try_that_fits_is_listed_as_the_one_attempt(family: Family) -> None:
    """docs/structured-output.md: with repair=N every try is in attempts, the one that
    fit with error None; a first try that fits is a one-try list, not an empty one."""
    async with open_replay_server([family.text_reply(FITS)]) as server:
        async with family.client(server.url) as client:
            done = await client.generate(REQUEST, repair=2)
    assert done.parsed == Forecast("Paris", 18) and len(server.requests) == 1
    assert [(a.message.text(), a.error) for a in done.attempts] == [(FITS, None)]
    assert done.attempts[0].response.usage == done.response.usage


@pytest.mark.parametrize("family", TEXT_FAMILIES, ids=TEXT_IDS)
async def test_repair_gives_up_with_every_attempt(family: Family) -> None:
    async with open_replay_server([family.text_reply(TOO_HOT)]) as server:
        async with family.client(server.url) as client:
            with pytest.raises(OutputValidationError) as caught:
                await client.generate(REQUEST, repair=2)
        assert len(server.requests) == 3
    error = caught.value
    assert str(error).startswith("output validation error: no answer fit after 3 tries; the last:")
    assert len(error.attempts) == 3 and error.raw == TOO_HOT
    for attempt in error.attempts:  # each with its error and its usage
        response = attempt.response  # type: ignore[attr-defined]
        assert attempt.error is not None  # type: ignore[attr-defined]
        assert (response.usage or response.counted_usage) is not None


async def test_repair_zero_keeps_the_error_in_the_completion() -> None:
    family = FAMILIES[0]
    async with open_replay_server([family.text_reply(TOO_HOT)]) as server:
        async with family.client(server.url) as client:
            done = await client.generate(REQUEST)
    assert done.parsed is None and done.attempts == ()
    assert isinstance(done.errors[0], OutputValidationError)


async def test_repair_needs_an_output_schema() -> None:
    family = FAMILIES[0]
    async with open_replay_server([family.text_reply("hi")]) as server:
        async with family.client(server.url) as client:
            with pytest.raises(ConfigurationError, match="output schema"):
                await client.generate(UnifiedRequest.new("m").add_user_message("x"), repair=1)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
async def test_repair_of_the_tool_loops_last_answer(family: Family) -> None:
    def weather(city: str) -> str:
        """Weather."""
        return "18 degrees"

    replies = [
        family.call_reply("weather", {"city": "Paris"}),
        family.text_reply(TOO_HOT),
        family.text_reply(FITS),
    ]
    async with open_replay_server(replies) as server:
        async with family.client(server.url) as client:
            async with client.run_tools(REQUEST, [weather], repair=1, max_steps=2) as stream:
                items: list[Any] = [item async for item in stream]
    assert stream.complete and stream.parsed == Forecast("Paris", 18)
    assert [a.error is None for a in stream.attempts] == [False, True]
    assert sum(isinstance(i, ToolResult) for i in items) == 1
    roles = [m.role.value for m in stream.conversation.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    usage = stream.usage  # three steps of 10 prompt and 5 completion tokens each
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (30, 15)


async def test_repair_of_the_tool_loop_gives_up_with_every_attempt() -> None:
    family = FAMILIES[0]
    async with open_replay_server([family.text_reply(TOO_HOT)]) as server:
        async with family.client(server.url) as client:
            with pytest.raises(OutputValidationError) as caught:
                async with client.run_tools(REQUEST, [], repair=1) as stream:
                    async for _ in stream:
                        pass
    assert len(caught.value.attempts) == 2


def test_repair_sums_the_usage_that_was_reported() -> None:
    """The repaired answer's usage is every try's added up: ``None`` when no try reported
    one, reasoning tokens only when some try reported them, the prompt cache's reads and
    writes likewise."""
    from cuca import PromptCacheUsage, TokenUsage
    from cuca.repair import sum_cache_usage, sum_usage

    assert sum_usage([]) is None and sum_usage([None, None]) is None
    assert sum_usage([TokenUsage(1, 2), None, TokenUsage(3, 4)]) == TokenUsage(4, 6, None)
    assert sum_usage([TokenUsage(1, 2), TokenUsage(3, 4, 5)]) == TokenUsage(4, 6, 5)
    assert sum_cache_usage([]) is None and sum_cache_usage([None]) is None
    assert sum_cache_usage(
        [PromptCacheUsage(10, 1), None, PromptCacheUsage(5, 2)]
    ) == PromptCacheUsage(15, 3)


async def test_repair_refuses_a_negative_count_and_quotes_the_error_back() -> None:
    """``repair=-1`` is refused before anything is sent; the message sent back to the
    model quotes the validation error and asks for the corrected JSON only."""
    from cuca.repair import feedback

    family = FAMILIES[0]
    async with open_replay_server([family.text_reply(FITS)]) as server:
        async with family.client(server.url) as client:
            with pytest.raises(ConfigurationError, match="repair is a number of retries"):
                await client.generate(REQUEST, repair=-1)
        assert server.requests == []
    error = OutputValidationError("99 is greater than the maximum of 60", TOO_HOT)
    assert feedback(error) == (
        "Your answer does not fit the required JSON Schema: 99 is greater than the maximum "
        "of 60. Answer again with only the corrected JSON."
    )


def scripted(*answers: tuple[str, tuple[CucaError, ...], PromptCacheUsage | None]) -> Any:
    """A turn function answering with each (text, errors, prompt cache usage) in turn,
    and the requests it was given (what ``repaired`` runs: a client's one turn)."""
    from cuca import ProviderEndpoint, UnifiedMessage, UnifiedResponse
    from cuca.stream import Completion
    from cuca.types import MessageRole, Text

    asked: list[UnifiedRequest] = []

    async def turn(request: UnifiedRequest) -> Completion:
        text, errors, cache = answers[len(asked)]
        asked.append(request)
        response = UnifiedResponse(
            ProviderEndpoint.OPENAI, "m", TokenUsage(10, 5), prompt_cache_usage=cache
        )
        message = UnifiedMessage(MessageRole.ASSISTANT, (Text(text),))
        return Completion(message, errors, response)

    turn.asked = asked  # type: ignore[attr-defined]
    return turn


async def test_repair_zero_is_one_turn_as_before_even_without_a_schema() -> None:
    """docs/structured-output.md: ``repair=0`` (the default) is one turn as before: a
    misfit stays an error of the completion, nothing is sent back, and no output schema
    is needed (FallbackClient.generate runs every turn through ``repaired``)."""
    from cuca.repair import repaired

    misfit = OutputValidationError("99 is greater than the maximum of 60", TOO_HOT)
    turn = scripted((TOO_HOT, (misfit,), None))
    done = await repaired(turn, REQUEST, 0)
    assert done.errors == (misfit,) and done.attempts == () and len(turn.asked) == 1
    plain = UnifiedRequest.new("m").add_user_message("hi")
    assert (await repaired(scripted(("hello", (), None)), plain, 0)).message.text() == "hello"


async def test_repair_refusals_say_what_is_wrong() -> None:
    from cuca.repair import repaired

    with pytest.raises(ConfigurationError) as negative:
        await repaired(scripted(), REQUEST, -1)
    assert negative.value.message == "repair is a number of retries: 0 or more"
    plain = UnifiedRequest.new("m").add_user_message("hi")
    with pytest.raises(ConfigurationError) as schemaless:
        await repaired(scripted(), plain, 1)
    assert schemaless.value.message == "repair= needs a request with an output schema"


async def test_repair_sums_every_tries_prompt_cache_and_keeps_the_last_tries_other_errors() -> (
    None
):
    """docs/structured-output.md: the response carries ``usage`` and
    ``prompt_cache_usage`` summed over every try (a try the prompt cache did not report
    adds nothing); ``errors`` are the last try's non-fatal error items."""
    from cuca.repair import repaired

    misfit = OutputValidationError("99 is greater than the maximum of 60", TOO_HOT)
    late = CucaError("a non-fatal item of the last try")
    turn = scripted(
        (TOO_HOT, (misfit,), PromptCacheUsage(100, 20)),
        (TOO_HOT, (misfit,), None),
        (FITS, (late,), PromptCacheUsage(30, 0)),
    )
    done = await repaired(turn, REQUEST, 2)
    assert done.response.prompt_cache_usage == PromptCacheUsage(130, 20)
    assert done.response.usage == TokenUsage(30, 15)
    assert done.errors == (late,)
    assert [a.error for a in done.attempts] == [misfit, misfit, None]
