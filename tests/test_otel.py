"""cuca.otel.OtelPlugin: one span per turn with the GenAI semantic conventions, read back
from the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from support.transcripts import transcript

from cuca import CucaClient, CucaError, ProviderEndpoint, RetryPolicy, UnifiedRequest
from cuca.otel import FIRST_BLOCK_EVENT, OtelPlugin
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
