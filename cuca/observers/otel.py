"""Traces: one OpenTelemetry span per turn, following the GenAI semantic conventions.

``OtelPlugin()`` is a plugin (``pip install 'cuca[otel]'``, which brings only the
OpenTelemetry API; the application chooses the SDK and the exporter). Each turn becomes a
``CLIENT`` span named ``chat {model}`` with the ``gen_ai.*`` request, response and usage
attributes, and an event when the first block arrived. A tool loop run on the client
(``client.run_tools``) becomes an ``invoke_agent`` span with a ``step {n}`` span per step,
holding that step's turn span and an ``execute_tool {name}`` span per tool call. A call
that needed approval has the decision on its ``execute_tool`` span: the
``cuca.tool.approval.*`` attributes and an event (``APPROVAL_EVENT``). A turn whose
charge made a ``Budget`` cross its ``warn_at`` has an event on its span
(``BUDGET_WARNING_EVENT``, with the ``cuca.budget.*`` attributes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from cuca.errors import CucaError
from cuca.plugins import (
    ApprovalEvent,
    BudgetWarning,
    CucaPlugin,
    LoopObserver,
    ToolDone,
    TurnObserver,
    TurnOutcome,
)
from cuca.types import Block, ToolCall, ToolResult, UnifiedRequest

__all__ = [
    "APPROVAL_EVENT",
    "BUDGET_WARNING_EVENT",
    "FIRST_BLOCK_EVENT",
    "OtelPlugin",
    "provider_name",
]

FIRST_BLOCK_EVENT = "gen_ai.response.first_chunk"
"""The span event recorded when the first block (or error item) of a turn arrived."""

APPROVAL_EVENT = "cuca.tool.approval"
"""The span event recorded on ``execute_tool`` when a call needing approval was decided."""

BUDGET_WARNING_EVENT = "cuca.budget.warning"
"""The span event recorded on a turn's span when its charge made a budget's spending
cross ``warn_at`` (attributes ``cuca.budget.unit``, ``.spent``, ``.limit``,
``.fraction``)."""

_PROVIDER_NAMES = {
    "openai": "openai",
    "anthropic": "anthropic",
    "google_gemini": "gcp.gemini",
    "deepseek": "deepseek",
}


def provider_name(kind: str) -> str:
    """``gen_ai.provider.name`` for a cuca endpoint kind: the convention's well-known
    value where there is one (``gcp.gemini`` for Gemini), else cuca's own name
    (``llama_cpp``, ``vllm``, ``lm_studio``, ``local``, ``custom:NAME``)."""
    return _PROVIDER_NAMES.get(kind, kind)


class OtelPlugin(CucaPlugin):
    """A plugin that traces every turn as one span, on ``tracer_provider`` (the global
    one by default). The span starts when the request leaves the request hooks and ends
    with the turn; it is a child of the span current in the task that runs the turn.
    """

    name = "otel"

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        from cuca._version import __version__

        self._tracer = trace.get_tracer("cuca", __version__, tracer_provider=tracer_provider)

    def observe(self, request: UnifiedRequest) -> TurnObserver:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(str(request.provider)),
            "gen_ai.request.model": request.model,
            "gen_ai.request.stream": request.stream,
        }
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        span = self._tracer.start_span(
            f"chat {request.model}", kind=SpanKind.CLIENT, attributes=attributes
        )
        return _SpanObserver(span)

    def observe_tools(self, request: UnifiedRequest) -> LoopObserver:
        return _LoopSpans(self._tracer, request)


class _LoopSpans(LoopObserver):
    """The spans of one tool loop, each current in the task that runs its part (so the
    turns and tool calls inside nest under them)."""

    def __init__(self, tracer: trace.Tracer, request: UnifiedRequest) -> None:
        self.tracer = tracer
        self.request = request

    def run(self) -> AbstractContextManager[None]:
        request = self.request
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider_name(str(request.provider)),
            "gen_ai.request.model": request.model,
        }
        return _current(self.tracer.start_span("invoke_agent", attributes=attributes))

    def step(self, number: int) -> AbstractContextManager[None]:
        span = self.tracer.start_span(f"step {number}", attributes={"cuca.tools.loop.step": number})
        return _current(span)

    @contextmanager
    def tool_call(self, call: ToolCall) -> Iterator[ToolDone]:
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        span = self.tracer.start_span(f"execute_tool {call.name}", attributes=attributes)

        def done(result: ToolResult, error_type: str | None) -> None:
            if result.is_error:
                span.set_attribute("error.type", error_type or "_OTHER")
                span.set_status(Status(StatusCode.ERROR, result.output.split("\n", 1)[0]))

        with _current(span):
            yield done

    def approval(self, event: ApprovalEvent) -> None:
        span = trace.get_current_span()  # the call's execute_tool span, current in its task
        attributes: dict[str, Any] = {
            "cuca.tool.approval.outcome": event.outcome,
            "cuca.tool.approval.by": event.by,
            "cuca.tool.approval.seconds": event.seconds,
        }
        if event.reason is not None:
            attributes["cuca.tool.approval.reason"] = event.reason
        span.set_attributes(attributes)
        span.add_event(APPROVAL_EVENT, attributes)


@contextmanager
def _current(span: Span) -> Iterator[None]:
    """Make ``span`` current in this task while the block runs; end it after. An error
    that ends the block marks it (a cancellation does not: the consumer left)."""
    with trace.use_span(
        span, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ):
        try:
            yield
        except Exception as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            raise


class _SpanObserver(TurnObserver):
    def __init__(self, span: Span) -> None:
        self.span = span
        self.started = time.perf_counter()
        self.first = False

    def on_items(self, items: Sequence[Block | CucaError]) -> None:
        if not self.first:
            self.first = True
            seconds = time.perf_counter() - self.started
            self.span.set_attribute("gen_ai.response.time_to_first_chunk", seconds)
            self.span.add_event(FIRST_BLOCK_EVENT, {"gen_ai.response.time_to_first_chunk": seconds})

    def on_budget_warning(self, warning: BudgetWarning) -> None:
        attributes = {f"cuca.budget.{name}": value for name, value in warning.to_dict().items()}
        self.span.add_event(BUDGET_WARNING_EVENT, attributes)

    def on_end(self, end: TurnOutcome) -> None:
        span = self.span
        response = end.response
        if response is not None:
            # the provider's own word, as the GenAI conventions' instrumentations report it
            reason = response.provider_finish_reason or response.finish_reason
            if reason is not None:
                span.set_attribute("gen_ai.response.finish_reasons", [str(reason)])
            usage = response.usage
            if usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
                if usage.reasoning_tokens is not None:
                    span.set_attribute(
                        "gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens
                    )
            cache = response.prompt_cache_usage
            if cache is not None:
                span.set_attribute("gen_ai.usage.cache_read.input_tokens", cache.read_tokens)
                span.set_attribute("gen_ai.usage.cache_creation.input_tokens", cache.write_tokens)
        if end.error is not None:
            span.set_attribute("error.type", type(end.error).__name__)
            span.set_status(Status(StatusCode.ERROR, str(end.error)))
        elif end.status == "cancelled":  # the consumer left early: not an error
            span.set_attribute("cuca.turn.cancelled", True)
        span.end()
