"""ResponseCache over loopback: a hit is a real stream through the chunk hooks, with the
kept usage, cached=True and cost 0; only clean turns are kept; the key is the request
after the hooks."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from support.transcripts import transcript

from cuca import (
    Block,
    CucaClient,
    CucaPlugin,
    HttpStatusError,
    ProviderEndpoint,
    ResponseCache,
    RetryPolicy,
    StoreError,
    Text,
    Thinking,
    ToolCall,
    TurnObserver,
    TurnOutcome,
    UnifiedRequest,
    UnifiedResponse,
)
from cuca.cache import cache_key
from cuca.store import MemoryStore, Store
from cuca.testing import Reply, open_replay_server

OPENAI = ProviderEndpoint.OPENAI
REQUEST = (
    UnifiedRequest.new("gpt-4o").add_user_message("Hello?").set_max_tokens(64).set_temperature(0)
)
TEXT = Reply(transcript("openai/text"))


def client(url: str, *plugins: CucaPlugin, **options: Any) -> CucaClient:
    return CucaClient(OPENAI, base_url=f"{url}/v1", api_key="k", plugins=plugins, **options)


async def blocks_of(c: CucaClient, request: UnifiedRequest) -> tuple[list[Any], UnifiedResponse]:
    async with c.generate_stream(request) as stream:
        items = [item async for item in stream]
    assert stream.response is not None
    return items, stream.response


async def test_cache_hit_replays_blocks_with_cached_usage_and_no_cost() -> None:
    cache = ResponseCache()
    async with open_replay_server(TEXT) as server, client(server.url, cache) as c:
        live, first = await blocks_of(c, REQUEST)
        replayed, second = await blocks_of(c, REQUEST)
    assert len(server.requests) == 1
    assert replayed == live and len(live) > 1
    assert not first.cached and second.cached
    assert second.usage == first.usage and second.usage is not None
    assert second.finish_reason == first.finish_reason
    assert second.prompt_cache_usage == first.prompt_cache_usage is not None
    assert first.endpoint is not None and second.endpoint is None  # no server answered
    assert first.cost is not None and first.cost > 0
    assert second.cost == Decimal(0)
    assert (cache.hits, cache.misses) == (1, 1)


async def test_cache_hit_goes_through_chunk_hooks_and_observers() -> None:
    class Shout(CucaPlugin):
        name = "shout"

        def __init__(self) -> None:
            self.completed: list[UnifiedResponse] = []
            self.ends: list[TurnOutcome] = []

        async def on_stream_chunk(self, block: Block) -> Block | None:
            # not idempotent: blocks kept after the hook would come back marked twice
            return Text(block.text + "|") if isinstance(block, Text) else block

        async def on_response_complete(self, response: UnifiedResponse) -> None:
            self.completed.append(response)

        def observe(self, request: UnifiedRequest) -> TurnObserver:
            ends = self.ends

            class Watch(TurnObserver):
                def on_end(self, end: TurnOutcome) -> None:
                    ends.append(end)

            return Watch()

    shout = Shout()
    async with open_replay_server(TEXT) as server, client(server.url, shout, ResponseCache()) as c:
        live, _ = await blocks_of(c, REQUEST)
        replayed, _ = await blocks_of(c, REQUEST)
    assert replayed == live
    texts = [b.text for b in replayed if isinstance(b, Text)]
    assert texts and all(t.endswith("|") and not t.endswith("||") for t in texts)
    assert [r.cached for r in shout.completed] == [False, True]
    assert [e.status for e in shout.ends] == ["ok", "ok"]
    assert shout.ends[1].response is not None and shout.ends[1].response.cached


async def test_cache_key_is_the_request_after_the_hooks() -> None:
    class Rewrite(CucaPlugin):
        name = "rewrite"

        async def on_request(self, request: UnifiedRequest) -> UnifiedRequest:
            return request.set_max_tokens(10)

    async with open_replay_server(TEXT) as server:
        async with client(server.url, Rewrite(), ResponseCache()) as c:
            await c.generate(REQUEST)
            await c.generate(REQUEST.set_max_tokens(999))  # the same once hooked: a hit
            await c.generate(REQUEST.add_user_message("more"))  # another request: a miss
    assert len(server.requests) == 2


def test_cache_key_names_provider_model_and_endpoint() -> None:
    import attrs

    key = cache_key(REQUEST, "http://a")
    assert len(key) == 64
    assert key == cache_key(REQUEST, "http://a")
    deepseek = attrs.evolve(REQUEST, provider=ProviderEndpoint.DEEPSEEK)
    assert key != cache_key(deepseek, "http://a")
    assert key != cache_key(REQUEST, "http://b")
    assert key != cache_key(UnifiedRequest.new("gpt-4o-mini").add_user_message("Hello?")
                            .set_max_tokens(64).set_temperature(0), "http://a")


async def test_cache_shared_by_clients_with_different_keys() -> None:
    cache = ResponseCache()
    async with open_replay_server(TEXT) as server:
        url = f"{server.url}/v1"
        async with CucaClient(OPENAI, base_url=url, api_key="one", plugins=[cache]) as a:
            await a.generate(REQUEST)
        async with CucaClient(OPENAI, base_url=url, api_key="two", plugins=[cache]) as b:
            completion = await b.generate(REQUEST)
    assert completion.response.cached
    assert len(server.requests) == 1


async def test_cache_sampled_requests_only_when_asked() -> None:
    import attrs

    sampled = REQUEST.set_temperature(0.7)
    unset = attrs.evolve(REQUEST, temperature=None)  # the server's default: it samples
    async with open_replay_server(TEXT) as server:
        async with client(server.url, ResponseCache()) as c:
            await c.generate(sampled)
            assert not (await c.generate(sampled)).response.cached
            await c.generate(unset)
            assert not (await c.generate(unset)).response.cached
        async with client(server.url, ResponseCache(cache_sampled=True)) as c:
            await c.generate(sampled)
            assert (await c.generate(sampled)).response.cached
    assert len(server.requests) == 5


async def test_cache_keeps_only_turns_that_ended_cleanly() -> None:
    slow = Reply(transcript("openai/text"), chunks=(32,) * 40, delay=0.005)
    failing = Reply(b'{"error": {"message": "bad"}}', status=400)
    async with open_replay_server([slow, failing, TEXT, TEXT]) as server:
        async with client(server.url, ResponseCache(), retry=RetryPolicy.never()) as c:
            async with c.generate_stream(REQUEST) as stream:
                async for _ in stream:
                    break  # dropped mid-way: not kept
            with pytest.raises(HttpStatusError):
                await c.generate(REQUEST)  # an error: not kept
            assert not (await c.generate(REQUEST)).response.cached
            assert (await c.generate(REQUEST)).response.cached
    assert len(server.requests) == 3


async def test_cache_hit_dropped_mid_way_is_clean() -> None:
    many = Reply(transcript("openai/text"), chunks=(16,) * 200)
    async with open_replay_server(many) as server, client(server.url, ResponseCache()) as c:
        live, _ = await blocks_of(c, REQUEST)
        for stop in (0, 1, len(live) // 2):
            async with c.generate_stream(REQUEST) as stream:
                for _ in range(stop + 1):
                    await stream.__anext__()
            assert stream.response is None  # left before the end
        replayed, response = await blocks_of(c, REQUEST)
    assert replayed == live and response.cached
    assert len(server.requests) == 1


class StandingTime:
    """``time.time`` for the memory store and the cache: it moves only when told, so
    an entry expires when the test says, however slow the machine."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


async def test_cache_ttl_and_max_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    from cuca.store import memory

    clock = StandingTime()
    monkeypatch.setattr(memory, "time", clock)
    cache = ResponseCache(ttl=0.2, max_entries=2, clock=clock.time)
    requests = [REQUEST.add_user_message(str(n)) for n in range(3)]
    async with open_replay_server(TEXT) as server, client(server.url, cache) as c:
        for request in requests:
            await c.generate(request)
        assert not (await c.generate(requests[0])).response.cached  # evicted: oldest
        assert (await c.generate(requests[2])).response.cached
        clock.now += 0.3
        assert not (await c.generate(requests[2])).response.cached  # expired
    assert len(server.requests) == 5


class BrokenStore(MemoryStore):
    """A store whose server is gone."""

    async def get(self, key: str) -> Any:
        raise StoreError("redis redis://127.0.0.1:1/0: ConnectionError: refused")

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        raise StoreError("redis redis://127.0.0.1:1/0: ConnectionError: refused")


async def test_cache_store_failure_is_a_store_error_or_a_miss_when_fail_open() -> None:
    store: Store = BrokenStore()
    async with open_replay_server(TEXT) as server:
        async with client(server.url, ResponseCache(store=store)) as c:
            with pytest.raises(StoreError, match="ConnectionError"):
                await c.generate(REQUEST)
        assert len(server.requests) == 0  # never a silent pass
        async with client(server.url, ResponseCache(store=store, fail_open=True)) as c:
            assert not (await c.generate(REQUEST)).response.cached
    assert len(server.requests) == 1


def test_cache_refuses_bad_settings() -> None:
    from cuca import ConfigurationError

    with pytest.raises(ConfigurationError, match="ttl must be"):
        ResponseCache(ttl=0)
    with pytest.raises(ConfigurationError, match="max_entries"):
        ResponseCache(max_entries=0)


async def test_cache_hit_reaches_user_stages_as_a_live_turn() -> None:
    from cuca.stages import before

    seen: list[list[Any]] = []

    async def record(receive: Any, send: Any) -> None:
        items: list[Any] = []
        async with send:
            async for batch in receive:
                items += [i for i in batch if isinstance(i, Text)]
                await send.send(batch)
        seen.append(items)

    stage = before("chunk_hooks", record)
    async with open_replay_server(TEXT) as server:
        async with client(server.url, ResponseCache(), stages=[stage]) as c:
            await c.generate(REQUEST)
            assert (await c.generate(REQUEST)).response.cached
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0]


async def test_cache_hit_on_the_local_engine() -> None:
    from cuca import LocalModel
    from cuca.engine import default_model_path

    model = LocalModel.load(default_model_path(), n_ctx=512)
    request = (UnifiedRequest.new("local").add_user_message("Say hi.").set_max_tokens(8)
               .set_temperature(0))
    async with CucaClient(ProviderEndpoint.LOCAL, local_model=model,
                          plugins=[ResponseCache()]) as c:
        live, first = await blocks_of(c, request)
        replayed, second = await blocks_of(c, request)
    assert replayed == live and live
    assert second.cached and not first.cached and second.usage == first.usage


async def test_cache_keeps_no_turn_with_an_error_item_or_an_error_mid_stream() -> None:
    """A turn that ended without a clean answer is answered by the server again: one
    with a malformed tool call (an error item, the turn otherwise complete), one the
    server broke off with an error event, one whose connection was cut mid-stream."""
    from cuca import CucaError

    malformed = transcript("openai/tool_call").replace(
        b'"arguments":"{\\""', b'"arguments":"[\\""', 1
    )
    assert malformed != transcript("openai/tool_call")
    text = transcript("openai/text")
    replies = {
        "malformed tool call": Reply(malformed),
        "error event": Reply(transcript("openai/error")),
        "cut": Reply(text, cut_after=len(text) // 2),
    }
    for name, reply in replies.items():
        async with open_replay_server(reply) as server:
            async with client(server.url, ResponseCache(), retry=RetryPolicy.never()) as c:
                for _ in range(2):
                    try:
                        items, _ = await blocks_of(c, REQUEST)
                    except CucaError:
                        continue
                    if name == "malformed tool call":
                        assert any(isinstance(i, CucaError) for i in items), (
                            "the malformed call's error item is gone: answered from the cache"
                        )
        assert len(server.requests) == 2, f"a turn with a {name} was kept and answered"


async def test_cache_hit_takes_no_permit_and_reserves_no_budget() -> None:
    """A hit sends nothing, so neither the limiter (one request a minute, no waiting)
    nor the budget (spent 1163 of 1200 tokens: a second reservation would not fit)
    refuses it, and nothing more is charged."""
    from cuca import Budget, RateLimiter

    limiter = RateLimiter(requests_per_minute=1, max_wait=0)
    budget = Budget(tokens=1200)
    async with open_replay_server(TEXT) as server:
        async with client(server.url, budget, ResponseCache(), rate_limiter=limiter) as c:
            await c.generate(REQUEST)
            assert (await c.generate(REQUEST)).response.cached
    assert len(server.requests) == 1
    assert (await budget.spent())["tokens"] == 1117 + 46


async def test_cache_entries_are_per_base_url() -> None:
    """The same request to two servers: each answers once (a client that left its
    base URL out of the key would answer the second server's turn from the first's)."""
    cache = ResponseCache()
    async with open_replay_server(TEXT) as one, open_replay_server(TEXT) as two:
        for server in (one, two, one, two):
            async with client(server.url, cache) as c:
                await c.generate(REQUEST)
    assert (len(one.requests), len(two.requests)) == (1, 1)
    assert (cache.hits, cache.misses) == (2, 2)


class UnwritableStore(MemoryStore):
    """A store that reads (every lookup a miss) but fails to write (a full disk): its
    ``set`` of an entry, or its ``update`` of the ``max_entries`` index, as ``failing``
    says."""

    def __init__(self, failing: str) -> None:
        super().__init__()
        self.failing = failing

    async def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        if self.failing == "set":
            raise StoreError("sqlite /var/lib/cuca.db: OperationalError: database or disk is full")
        await super().set(key, value, ttl)

    async def update(self, key: str, change: Any, ttl: float | None = None) -> Any:
        if self.failing == "update":
            raise StoreError("sqlite /var/lib/cuca.db: OperationalError: database or disk is full")
        return await super().update(key, change, ttl)


@pytest.mark.parametrize("failing", ["set", "update"])
async def test_cache_entry_that_cannot_be_written_ends_the_turn_with_a_store_error(
    failing: str,
) -> None:
    """docs/cache.md: a store that fails ends the turn with StoreError, never a silent
    pass: writing the entry (``set``), or its place in the ``max_entries`` index
    (``update``), as much as reading it; with ``fail_open=True`` the turn keeps its
    answer."""
    async with open_replay_server(TEXT) as server:
        cache = ResponseCache(store=UnwritableStore(failing), max_entries=10)
        async with client(server.url, cache) as c:
            with pytest.raises(StoreError, match="disk is full"):
                await c.generate(REQUEST)
        cache = ResponseCache(store=UnwritableStore(failing), max_entries=10, fail_open=True)
        async with client(server.url, cache) as c:
            done = await c.generate(REQUEST)
            assert done.text and not done.response.cached
    assert len(server.requests) == 2


def test_cache_key_is_the_sha256_of_the_canonical_json_and_the_endpoint() -> None:
    """docs/cache.md: the key is the SHA-256 of the request's canonical JSON (keys
    sorted, no spaces, text as it is, not escaped) with the base URL the turn goes to:
    another process, or another language, computes the same key."""
    import hashlib
    import json

    from cuca import to_json

    request = REQUEST.add_user_message("Grüß dich, señor")
    canonical = json.dumps(
        {"request": json.loads(to_json(request)), "endpoint": "http://a/v1"},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    )
    assert "Grüß" in canonical and ": " not in canonical
    assert cache_key(request, "http://a/v1") == hashlib.sha256(canonical.encode()).hexdigest()


def test_cache_refuses_every_bad_setting() -> None:
    from cuca import ConfigurationError

    with pytest.raises(ConfigurationError, match="ttl must be"):
        ResponseCache(ttl=True)
    with pytest.raises(ConfigurationError, match="max_entries"):
        ResponseCache(max_entries=2.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="store must be a cuca store, not"):
        ResponseCache(store={})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"not \{\} \(dict\)"):  # what was passed
        ResponseCache(store={})  # type: ignore[arg-type]
    one = ResponseCache(ttl=0.5, max_entries=1)  # the smallest settings that make sense
    assert repr(one) == "ResponseCache(ttl=0.5, max_entries=1, store=MemoryStore(0 keys))"


async def test_cache_max_entries_of_one_keeps_the_last_and_clear_drops_it() -> None:
    """``max_entries=1``: each turn kept drops the one before; ``clear()`` drops every
    entry recorded, so the next turn of each goes to the server."""
    cache = ResponseCache(max_entries=1)
    other = REQUEST.add_user_message("again")
    async with open_replay_server(TEXT) as server, client(server.url, cache) as c:
        await c.generate(REQUEST)
        await c.generate(other)
        assert (await c.generate(other)).response.cached
        assert not (await c.generate(REQUEST)).response.cached  # dropped for `other`
        await cache.clear()
        assert not (await c.generate(REQUEST)).response.cached
    assert len(server.requests) == 4


async def test_cache_key_kept_again_holds_one_place_and_clear_drops_the_index() -> None:
    """``max_entries=2``: a turn kept again takes one place in the index, its newest,
    so two more kept after it leave it and the last one (the oldest other goes first);
    ``clear()`` drops the entries and the index itself, leaving the store empty."""
    from cuca.admission import Replay
    from cuca.types import TurnSummary

    cache = ResponseCache(max_entries=2)
    kept = Replay((Text("hi"),), TurnSummary(finish_reason="stop"))
    first, second = REQUEST, REQUEST.add_user_message("again")
    await cache.keep(first, "http://a", kept)
    await cache.keep(second, "http://a", kept)
    await cache.keep(first, "http://a", kept)  # kept again: now the newest
    third = REQUEST.add_user_message("third")
    await cache.keep(third, "http://a", kept)
    assert await cache.lookup(first, "http://a") is not None
    assert await cache.lookup(second, "http://a") is None  # the oldest, dropped
    assert await cache.lookup(third, "http://a") is not None
    await cache.clear()
    assert repr(cache.store) == "MemoryStore(0 keys)"


MIXED: tuple[Block, ...] = (
    Thinking("Let me"),
    Thinking(" think."),
    Thinking("", signature="EqQBCgIYAh", provider=ProviderEndpoint.ANTHROPIC),
    Thinking("", signature="c2VjcmV0", provider=ProviderEndpoint.ANTHROPIC, redacted=True),
    Thinking("Plan", id="rs_1"),
    Text("Hel"),
    Text("lo"),
    Text(""),
    Text("", signature="", provider=ProviderEndpoint.GOOGLE_GEMINI),  # an empty signature is one
    Text(" there"),
    ToolCall("call_1", "lookup", {"q": "ü 日本"}),
    Text("done"),
)


async def test_cache_entry_keeps_every_block_with_its_chunking_and_fields() -> None:
    """A hit gives back the very blocks of the live turn, one for each delta (a hit
    streams the answer in the chunks it came in): plain text and reasoning deltas are
    kept as runs of their strings, every block with a field set (a signature, even an
    empty one, a provider, ``redacted``, an id) whole, in its place."""
    from cuca.admission import Replay
    from cuca.types import TurnSummary

    cache = ResponseCache()
    summary = TurnSummary(finish_reason="stop")
    await cache.keep(REQUEST, "http://a", Replay(MIXED, summary))
    hit = await cache.lookup(REQUEST, "http://a")
    assert hit is not None and hit.blocks == MIXED and hit.summary == summary
    assert [type(b) for b in hit.blocks] == [type(b) for b in MIXED]
    entry = await cache.store.get(f"cuca:cache:{cache_key(REQUEST, 'http://a')}")
    runs = [e for e in entry["blocks"] if set(e) != {"type", "value"}]
    assert runs == [
        {"thinking": ["Let me", " think."]},
        {"texts": ["Hel", "lo", ""]},
        {"texts": [" there"]},
        {"texts": ["done"]},
    ]


async def test_cache_reads_entries_kept_one_block_an_element() -> None:
    """An entry written before the runs (each block adjacently tagged, as
    ``cuca.unstructure`` writes it) is still answered; one that holds no kept turn (an
    element neither a block nor a run of strings, another program's value) is a
    StoreError, as a store that failed is (docs/cache.md), and a miss with
    ``fail_open``."""
    from cuca import unstructure
    from cuca.types import TurnSummary

    cache = ResponseCache()
    key = f"cuca:cache:{cache_key(REQUEST, 'http://a')}"
    summary = unstructure(TurnSummary(finish_reason="stop"))
    await cache.store.set(key, {"blocks": [unstructure(b) for b in MIXED], "summary": summary})
    hit = await cache.lookup(REQUEST, "http://a")
    assert hit is not None and hit.blocks == MIXED
    wrong = [{"blocks": [run], "summary": summary}
             for run in ({"texts": ["a", 1]}, {"texts": "ab"}, {"text": ["a"]})]
    wrong += [{"blocks": [], "summary": {"finish_reason": 3}}, {"summary": summary}, [1, 2]]
    for entry in wrong:
        await cache.store.set(key, entry)
        with pytest.raises(StoreError, match=f"{key} holds no turn a cache kept"):
            await cache.lookup(REQUEST, "http://a")
        assert await ResponseCache(store=cache.store, fail_open=True).lookup(
            REQUEST, "http://a") is None


@pytest.mark.parametrize("name", ["thinking", "redacted_thinking", "tool_use"])
async def test_cache_hit_replays_an_anthropic_turn_as_it_came(name: str) -> None:
    """Reasoning deltas, their signature, a redacted block and a tool call come back
    from the cache as the live turn gave them, in the same order."""
    reply = Reply(transcript(f"anthropic/{name}"))
    async with open_replay_server(reply) as server:
        async with CucaClient(ProviderEndpoint.ANTHROPIC, base_url=server.url, api_key="k",
                              plugins=[ResponseCache()]) as c:
            live, first = await blocks_of(c, REQUEST)
            replayed, second = await blocks_of(c, REQUEST)
    assert replayed == live and len(live) > 1 and second.cached and not first.cached
    assert len(server.requests) == 1
