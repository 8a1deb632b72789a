"""The turn's three seams (cuca.seams; docs/pipeline.md, "The turn's three seams"):
*before*, every request hook in order, the observers started, the cache asked, every
gate passed; *during*, the gates shown each attempt's head; *after*, the gates' tickets
settled with how the turn ended, the observers told. A cache hit replays in place of
the backend's points, a user's stages after the backend's blocks still seeing them.

Each test runs one or two turns over loopback, with a gate, a plugin or a stage
written for it that records what it saw."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
from support.transcripts import transcript

from cuca import (
    CucaClient,
    CucaError,
    CucaPlugin,
    DeadlineExceeded,
    HttpStatusError,
    PluginError,
    ProviderEndpoint,
    ResponseCache,
    RetryPolicy,
    StoreError,
    Text,
    Timeouts,
    TurnObserver,
    TurnOutcome,
    UnifiedRequest,
)
from cuca.admission import Counter
from cuca.seams import REPLAY_BATCH
from cuca.stages import after, before
from cuca.testing import Reply, open_replay_server
from cuca.turn import AttemptHead

REQUEST = (
    UnifiedRequest.new("gpt-4o").add_user_message("Hello?").set_max_tokens(64).set_temperature(0)
)
TEXT = Reply(transcript("openai/text"))
ANSWER = "I'm unable to provide real-time weather updates."


def client(url: str, *plugins: CucaPlugin, **options: Any) -> CucaClient:
    return CucaClient(
        ProviderEndpoint.OPENAI, base_url=f"{url}/v1", api_key="k", plugins=plugins, **options
    )


@attrs.define
class Ticket:
    heads: list[int] = attrs.Factory(list)
    ends: list[TurnOutcome] = attrs.Factory(list)
    fails: CucaError | None = None

    async def on_head(self, head: AttemptHead) -> None:
        self.heads.append(head.status)

    async def settle(self, end: TurnOutcome) -> None:
        self.ends.append(end)
        if self.fails is not None:
            raise self.fails


@attrs.define
class Gate:
    """A gate that admits every turn with a ticket that records what it is told."""

    fails: CucaError | None = None
    tickets: list[Ticket] = attrs.Factory(list)

    async def admit(self, request: UnifiedRequest, count: Counter) -> Ticket:
        self.tickets.append(Ticket(fails=self.fails))
        return self.tickets[-1]


class Seen:
    """A stage that passes its batches on and records them."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    async def __call__(self, receive: Any, send: Any) -> None:
        async with send:
            async for batch in receive:
                self.batches.append(list(batch))
                await send.send(batch)

    def texts(self) -> str:
        return "".join(i.text for b in self.batches for i in b if isinstance(i, Text))


def max_tokens(sent: Any) -> int:
    body = sent.json()
    return int(body.get("max_completion_tokens", body.get("max_tokens")))


def long_answer(deltas: int) -> bytes:
    """The text transcript with its second frame (a delta of text) said ``deltas`` times."""
    frames = transcript("openai/text").split(b"\n\n")
    return b"\n\n".join([frames[0], *[frames[1]] * deltas, *frames[2:]])


async def text_of(c: CucaClient, request: UnifiedRequest = REQUEST) -> tuple[str, Any]:
    done = await c.generate(request)
    return done.text, done.response


# -- before ---------------------------------------------------------------------------


class Tag(CucaPlugin):
    name = "tag"

    async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
        return request.set_max_tokens(7)


class Quiet(CucaPlugin):
    """A plugin with no request hook."""

    name = "quiet"


class Counts(CucaPlugin):
    """A plugin that counts with the turn's own backend (as a compactor does)."""

    name = "counts"

    def __init__(self) -> None:
        self.seen: list[UnifiedRequest] = []

    async def prepare_turn(self, request: UnifiedRequest, backend: Any) -> UnifiedRequest:
        self.seen.append(request)
        counted = await backend.count_tokens(request)
        return request.set_max_tokens(counted.tokens + 100)


class Nothing(CucaPlugin):
    name = "nothing"

    async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
        return None  # type: ignore[return-value]


async def test_seams_run_every_request_hook_past_a_plugin_without_one() -> None:
    async with open_replay_server(TEXT) as server:
        async with client(server.url, Quiet(), Tag()) as c:
            await c.generate(REQUEST)
    assert max_tokens(server.requests[0]) == 7


async def test_seams_prepare_turn_counts_with_the_turns_backend() -> None:
    counts = Counts()
    async with open_replay_server(TEXT) as server:
        async with client(server.url, Tag(), counts) as c:
            count = (await c.count_tokens(REQUEST.set_max_tokens(7))).tokens
            await c.generate(REQUEST)
    assert [r.max_tokens for r in counts.seen] == [7]  # after the hook before it
    assert max_tokens(server.requests[0]) == count + 100


async def test_seams_hook_that_returns_no_request_is_a_plugin_error() -> None:
    async with open_replay_server(TEXT) as server:
        async with client(server.url, Nothing()) as c:
            with pytest.raises(PluginError) as raised:
                await c.generate(REQUEST)
    assert "nothing" in str(raised.value)
    assert str(raised.value).endswith(": on_request must return a request")
    assert server.requests == []


class Watching(CucaPlugin):
    name = "watching"

    def __init__(self) -> None:
        self.requests: list[UnifiedRequest] = []
        self.ends: list[TurnOutcome] = []

    def observe(self, request: UnifiedRequest) -> TurnObserver:
        self.requests.append(request)
        ends = self.ends

        class Ends(TurnObserver):
            def on_end(self, end: TurnOutcome) -> None:
                ends.append(end)

        return Ends()


class Fails(CucaPlugin):
    name = "fails"

    async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
        raise OSError("disk full")


async def test_seams_observer_of_a_turn_whose_hook_failed_sees_its_request_and_error() -> None:
    watching = Watching()
    async with open_replay_server(TEXT) as server:
        async with client(server.url, watching, Fails()) as c:
            with pytest.raises(PluginError):
                await c.generate(REQUEST)
    assert [r.messages for r in watching.requests] == [REQUEST.messages]
    (end,) = watching.ends
    assert end.status == "error" and isinstance(end.error, PluginError)


# -- during and after: the gates ------------------------------------------------------


async def test_seams_gate_sees_the_heads_and_is_settled_with_the_response() -> None:
    gate = Gate()
    async with open_replay_server(TEXT) as server:
        async with client(server.url, rate_limiter=gate) as c:
            _, response = await text_of(c)
    (ticket,) = gate.tickets
    assert ticket.heads == [200]
    assert ticket.ends == [TurnOutcome("ok", response)]


async def test_seams_gate_of_a_turn_left_before_its_end_is_settled_as_cancelled() -> None:
    gate = Gate()
    slow = Reply(transcript("openai/text"), chunks=(32,) * 40, delay=0.005)
    async with open_replay_server(slow) as server:
        async with client(server.url, rate_limiter=gate) as c:
            async with c.generate_stream(REQUEST) as stream:
                async for _ in stream:
                    break
    assert gate.tickets[0].ends == [TurnOutcome("cancelled")]


async def test_seams_gate_of_a_failed_turn_is_settled_with_its_error() -> None:
    gate = Gate()
    failing = Reply(b'{"error": {"message": "bad"}}', status=400)
    async with open_replay_server(failing) as server:
        async with client(server.url, rate_limiter=gate) as c:
            with pytest.raises(HttpStatusError) as raised:
                await c.generate(REQUEST)
    (end,) = gate.tickets[0].ends
    assert end.status == "error" and end.error is raised.value


async def test_seams_ticket_that_fails_to_settle_is_raised_when_the_turn_is_left() -> None:
    gate = Gate(fails=StoreError("redis: ConnectionError: refused"))
    async with open_replay_server(TEXT) as server:
        async with client(server.url, rate_limiter=gate) as c:
            with pytest.raises(StoreError, match="refused"):
                await c.generate(REQUEST)
    assert len(gate.tickets[0].ends) == 1


# -- the turn's options ---------------------------------------------------------------


async def test_seams_turn_headers_and_retry_reach_the_turn() -> None:
    busy = Reply(b'{"error": {"message": "busy"}}', status=503)
    async with open_replay_server([busy, TEXT]) as server:
        async with client(server.url, retry=RetryPolicy(max_retries=1, initial_delay=0.0)) as c:
            with pytest.raises(HttpStatusError):
                async with c.generate_stream(
                    REQUEST, retry=RetryPolicy.never(), headers={"x-turn": "1"}
                ) as stream:
                    async for _ in stream:
                        pass
    assert len(server.requests) == 1
    assert server.requests[0].headers["x-turn"] == "1"


async def test_seams_total_deadline_ends_a_turn_of_actors() -> None:
    endless = Reply.endless(b'data: {"choices": []}\n\n', delay=0.01)
    async with open_replay_server(endless) as server:
        async with client(server.url, fused=False, timeout=Timeouts(total=0.3)) as c:
            with trio.fail_after(30):  # a guard against a hang, not a measure
                with pytest.raises(DeadlineExceeded, match="deadline"):
                    await c.generate(REQUEST)


async def test_seams_observer_of_a_turn_left_before_its_end_sees_it_cancelled() -> None:
    """Left after its first item, even when the whole answer came in one batch."""
    watching = Watching()
    async with open_replay_server(TEXT) as server:
        async with client(server.url, watching) as c:
            async with c.generate_stream(REQUEST) as stream:
                async for _ in stream:
                    break
    assert watching.ends == [TurnOutcome("cancelled")]


# -- a cache hit ----------------------------------------------------------------------


async def test_seams_cache_hit_reaches_a_stage_after_the_backends_blocks() -> None:
    seen = Seen()
    async with open_replay_server(TEXT) as server:
        async with client(server.url, ResponseCache(), stages=[after("decode", seen)]) as c:
            live, _ = await text_of(c)
            assert seen.texts() == live
            seen.batches.clear()
            replayed, response = await text_of(c)
    assert response.cached and replayed == live == ANSWER
    assert seen.texts() == live


async def test_seams_cache_hit_reaches_a_stage_after_the_request_hooks() -> None:
    seen = Seen()
    async with open_replay_server(TEXT) as server:
        async with client(server.url, ResponseCache(), stages=[after("request_hooks", seen)]) as c:
            await text_of(c)
            _, response = await text_of(c)
    assert response.cached
    assert [b[0].max_tokens for b in seen.batches] == [64, 64]


@pytest.mark.parametrize("where", ["before decode", "after encode", "after transport"])
async def test_seams_cache_hit_leaves_out_a_stage_among_the_backends_points(where: str) -> None:
    seen = Seen()
    side, point = where.split()
    stage = (after if side == "after" else before)(point, seen)
    async with open_replay_server(TEXT) as server:
        async with client(server.url, ResponseCache(), stages=[stage]) as c:
            await text_of(c)
            seen.batches.clear()
            replayed, response = await text_of(c)
    assert response.cached and replayed == ANSWER
    assert seen.batches == []


async def test_seams_cache_hit_replays_its_blocks_in_batches_of_at_most_replay_batch() -> None:
    many = Reply(long_answer(3 * REPLAY_BATCH))
    seen = Seen()
    async with open_replay_server(many) as server:
        async with client(server.url, ResponseCache(), stages=[after("decode", seen)]) as c:
            live, _ = await text_of(c)
            seen.batches.clear()
            replayed, response = await text_of(c)
    assert response.cached and replayed == live
    blocks = sum(len(b) for b in seen.batches)
    assert blocks > REPLAY_BATCH
    assert max(len(b) for b in seen.batches) <= REPLAY_BATCH


async def test_seams_cache_keeps_no_turn_left_after_its_first_item() -> None:
    """Even when the whole answer came in one read, a turn its consumer left before the
    end is not kept: the next one goes to the server."""
    async with open_replay_server(TEXT) as server:
        async with client(server.url, ResponseCache()) as c:
            async with c.generate_stream(REQUEST) as stream:
                async for _ in stream:
                    break
            assert stream.response is None
            _, response = await text_of(c)
    assert not response.cached
    assert len(server.requests) == 2
