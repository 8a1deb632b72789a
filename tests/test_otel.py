"""cuca.observers.otel.OtelPlugin: one span per turn with the GenAI semantic conventions, read back
from the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from support.transcripts import transcript

from cuca import (
    CucaClient,
    CucaError,
    ProviderEndpoint,
    RetryPolicy,
    Tool,
    ToolResult,
    UnifiedRequest,
)
from cuca.observers.otel import FIRST_BLOCK_EVENT, OtelPlugin
from cuca.testing import Reply, open_replay_server


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def plugin(exporter: InMemorySpanExporter) -> OtelPlugin:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelPlugin(tracer_provider=provider)


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_otel_one_span_per_turn_with_genai_attributes(
    exporter: InMemorySpanExporter, plugin: OtelPlugin
) -> None:
    request = (
        UnifiedRequest.new("claude-sonnet-4-20250514")
        .add_user_message("hi")
        .set_max_tokens(300)
        .set_temperature(0.5)
    )
    async with open_replay_server(Reply(transcript("anthropic/cache_usage"))) as server:
        async with CucaClient(
            ProviderEndpoint.ANTHROPIC, base_url=server.url, api_key="k", plugins=[plugin]
        ) as client:
            await client.generate(request)
    (span,) = exporter.get_finished_spans()
    assert span.name == "chat claude-sonnet-4-20250514"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    found = attributes(span)
    ttfb = found.pop("gen_ai.response.time_to_first_chunk")
    assert found == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-20250514",
        "gen_ai.request.stream": True,
        "gen_ai.request.max_tokens": 300,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.response.finish_reasons": ("end_turn",),
        "gen_ai.usage.input_tokens": 22 + 190 + 1843,
        "gen_ai.usage.output_tokens": 9,
        "gen_ai.usage.cache_read.input_tokens": 1843,
        "gen_ai.usage.cache_creation.input_tokens": 190,
    }
    (event,) = span.events
    assert event.name == FIRST_BLOCK_EVENT
    assert event.attributes == {"gen_ai.response.time_to_first_chunk": ttfb}
    assert span.start_time is not None and span.end_time is not None
    assert span.start_time < event.timestamp < span.end_time
    assert 0 < ttfb < (span.end_time - span.start_time) / 1e9


async def test_otel_reasoning_count_and_provider_names(
    exporter: InMemorySpanExporter, plugin: OtelPlugin
) -> None:
    cases = [
        (ProviderEndpoint.DEEPSEEK, "deepseek/reasoner", "/v1", "deepseek"),
        (ProviderEndpoint.GOOGLE_GEMINI, "gemini/usage_only_final", "", "gcp.gemini"),
        (ProviderEndpoint.VLLM, "vllm/reasoning_both_fields", "/v1", "vllm"),
    ]
    for provider, name, suffix, _ in cases:
        async with open_replay_server(Reply(transcript(name))) as server:
            async with CucaClient(
                provider, base_url=server.url + suffix, api_key="k", plugins=[plugin]
            ) as client:
                await client.generate(UnifiedRequest.new("m").add_user_message("hi"))
    spans = exporter.get_finished_spans()
    assert [attributes(s)["gen_ai.provider.name"] for s in spans] == [c[3] for c in cases]
    deepseek, gemini, vllm = map(attributes, spans)
    assert deepseek["gen_ai.usage.reasoning.output_tokens"] == 94
    assert deepseek["gen_ai.usage.output_tokens"] == 128
    assert gemini["gen_ai.usage.reasoning.output_tokens"] == 89
    assert gemini["gen_ai.usage.cache_read.input_tokens"] == 4
    assert vllm["gen_ai.usage.cache_read.input_tokens"] == 16
    assert "gen_ai.usage.reasoning.output_tokens" not in vllm  # not reported


async def test_otel_failed_turn_has_error_status_and_type(
    exporter: InMemorySpanExporter, plugin: OtelPlugin
) -> None:
    refused = Reply(b'{"error": {"message": "bad key"}}', status=401)
    async with open_replay_server(refused) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k", plugins=[plugin]
        ) as client:
            with pytest.raises(CucaError) as raised:
                await client.generate(
                    UnifiedRequest.new("gpt-4o").add_user_message("hi"), retry=RetryPolicy.never()
                )
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == str(raised.value)
    assert attributes(span)["error.type"] == type(raised.value).__name__
    assert "gen_ai.usage.input_tokens" not in attributes(span)
    assert span.events == ()  # no block ever arrived


async def test_otel_dropped_stream_ends_its_span(
    exporter: InMemorySpanExporter, plugin: OtelPlugin
) -> None:
    frame = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    async with open_replay_server(Reply.endless(frame, delay=0.001)) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k", plugins=[plugin]
        ) as client:
            async with client.generate_stream(UnifiedRequest.new("m")) as stream:
                async for _ in stream:
                    break
    (span,) = exporter.get_finished_spans()
    assert attributes(span)["cuca.turn.cancelled"] is True
    assert span.status.status_code is StatusCode.UNSET
    assert [e.name for e in span.events] == [FIRST_BLOCK_EVENT]


async def test_otel_turn_span_is_a_child_of_the_current_span(
    exporter: InMemorySpanExporter, plugin: OtelPlugin
) -> None:
    tracer = plugin._tracer
    async with open_replay_server(Reply(transcript("openai/text"))) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url + "/v1", api_key="k", plugins=[plugin]
        ) as client:
            with tracer.start_as_current_span("handle request") as parent:
                await client.generate(UnifiedRequest.new("gpt-4o").add_user_message("hi"))
    turn, outer = exporter.get_finished_spans()
    assert outer.name == "handle request"
    assert turn.parent is not None
    assert turn.parent.span_id == parent.get_span_context().span_id


LOOP_REQUEST = UnifiedRequest.new("gpt-4o").add_user_message("Weather in Edinburgh, and AAPL?")


async def stock(**arguments: Any) -> str:
    return "189.5"


def loop_tools(weather: Any) -> list[Tool]:
    """The two tools of OpenAI's recorded parallel call (Edinburgh's weather, AAPL)."""
    return [
        Tool("GetWeatherArgs", "Weather.", {"type": "object"}, weather),
        Tool("get_stock_price", "Stock price.", {"type": "object"}, stock),
    ]


async def test_otel_tool_loop_steps_and_tool_calls_are_child_spans(
    exporter: InMemorySpanExporter, plugin: OtelPlugin
) -> None:
    """Step 1 calls two tools in parallel (the weather one raises), step 2 answers: the
    trace shows the loop, each step with its turn and its calls, the failed call in error."""

    async def weather(**arguments: Any) -> str:
        raise LookupError(f"no station in {arguments['city']}")

    replies = [Reply(transcript("openai/parallel_tool_calls")), Reply(transcript("openai/text"))]
    async with open_replay_server(replies) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url, api_key="k", plugins=[plugin]
        ) as client:
            async with client.run_tools(LOOP_REQUEST, loop_tools(weather)) as stream:
                async for _ in stream:
                    pass
    assert stream.complete
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans if s.context is not None}

    def tree(parent: int | None) -> list[tuple[str, Any]]:
        children = [s for s in spans if (s.parent.span_id if s.parent else None) == parent]
        children.sort(key=lambda s: s.name)  # the calls run in parallel: no order in time
        return [(s.name, tree(s.context.span_id) if s.context else []) for s in children]

    (root,) = [s for s in spans if s.parent is None]
    assert tree(None) == [
        (
            "invoke_agent",
            [
                (
                    "step 1",
                    [
                        ("chat gpt-4o", []),
                        ("execute_tool GetWeatherArgs", []),
                        ("execute_tool get_stock_price", []),
                    ],
                ),
                ("step 2", [("chat gpt-4o", [])]),
            ],
        )
    ]
    assert len(by_id) == 7
    assert attributes(root) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
    }
    tool_spans = {s.name: s for s in spans if s.name.startswith("execute_tool")}
    failed = tool_spans["execute_tool GetWeatherArgs"]
    assert attributes(failed) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "GetWeatherArgs",
        "gen_ai.tool.call.id": "call_JMW1whyEaYG438VE1OIflxA2",
        "gen_ai.tool.type": "function",
        "error.type": "LookupError",
    }
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "LookupError: no station in Edinburgh"
    succeeded = tool_spans["execute_tool get_stock_price"]
    assert attributes(succeeded)["gen_ai.tool.call.id"] == "call_DNYTawLBoN8fj3KN6qU9N1Ou"
    assert "error.type" not in attributes(succeeded)
    assert succeeded.status.status_code is StatusCode.UNSET
    steps = [s for s in spans if s.name.startswith("step")]
    assert [attributes(s)["cuca.tools.loop.step"] for s in steps] == [1, 2]
    assert all(s.status.status_code is StatusCode.UNSET for s in [*steps, root])
    # the calls ran inside their step: after its turn ended, before the step ended
    chat1 = next(s for s in spans if s.name.startswith("chat") and s.parent == steps[0].context)
    for span in tool_spans.values():
        assert chat1.end_time <= span.start_time and span.end_time <= steps[0].end_time  # type: ignore[operator]


async def test_otel_tool_loop_failed_step_marks_the_step_and_the_loop(
    exporter: InMemorySpanExporter, plugin: OtelPlugin
) -> None:
    """A step whose turn fails ends the loop with the error: the turn, its step and the
    loop span are all in error, with the error's type."""

    def echo(text: str) -> str:
        return text

    refused = Reply(b'{"error": {"message": "bad key"}}', status=401)
    request = UnifiedRequest.new("gpt-4o").add_user_message("hi")
    async with open_replay_server(refused) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI,
            base_url=server.url,
            api_key="k",
            plugins=[plugin],
            retry=RetryPolicy.never(),
        ) as client:
            with pytest.raises(CucaError) as raised:
                async with client.run_tools(request, [echo]) as stream:
                    async for _ in stream:
                        pass
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert sorted(spans) == ["chat gpt-4o", "invoke_agent", "step 1"]
    for span in spans.values():
        assert span.status.status_code is StatusCode.ERROR
        assert attributes(span)["error.type"] == type(raised.value).__name__


async def test_otel_tool_loop_left_early_ends_every_span_without_error(
    exporter: InMemorySpanExporter, plugin: OtelPlugin
) -> None:
    """Leaving the loop while a tool still runs cancels it: its span, the step's and the
    loop's all end, none in error (the consumer chose to leave)."""

    async def forever(**arguments: Any) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_replay_server(Reply(transcript("openai/parallel_tool_calls"))) as server:
        async with CucaClient(
            ProviderEndpoint.OPENAI, base_url=server.url, api_key="k", plugins=[plugin]
        ) as client:
            async with client.run_tools(LOOP_REQUEST, loop_tools(forever)) as stream:
                async for item in stream:
                    if isinstance(item, ToolResult):
                        break  # the weather call still runs
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert sorted(spans) == [
        "chat gpt-4o",
        "execute_tool GetWeatherArgs",
        "execute_tool get_stock_price",
        "invoke_agent",
        "step 1",
    ]
    for span in spans.values():
        assert span.status.status_code is StatusCode.UNSET
        assert "error.type" not in attributes(span)
