"""The public surface of cuca is deliberate: this test locks it."""

from __future__ import annotations

import cuca
import cuca.stages
import cuca.testing


def public(module: object) -> set[str]:
    return {name for name in dir(module) if not name.startswith("_")} - SUBMODULES


SUBMODULES = {
    "assemble",
    "client",
    "convert",
    "errors",
    "plugins",
    "stream",
    "types",
    "stages",
    "providers",
    "engine",
    "testing",
    "retry",
    "tools",
    "repair",
    "partial",
    "mcp",
    "routing",
    "observers",
    "schema",
    "cli",
    "cost",
    "observe",
    "annotations",
    "context",
    "custom",
    "pipeline",
    "sse",
    "hooks",
    "http",
    "opening",
    "probe",
    "protocols",
    "registry",
    "base",
    "turn",
    "items",
    "points",
    "runner",
    "stage",
    "redaction",
    "redact",
    "admission",
    "limits",
    "cache",
    "store",
    "TYPE_CHECKING",
    "Any",
}

CUCA = {
    "Budget",
    "BudgetExceeded",
    "BudgetWarning",
    "MemoryStore",
    "RateLimitExceeded",
    "RateLimiter",
    "RedisStore",
    "ResponseCache",
    "SqliteStore",
    "StoreError",
    "AnthropicConfig",
    "AnthropicThinkingParams",
    "AuthenticationError",
    "Block",
    "Capabilities",
    "CompactionReport",
    "Compactor",
    "Completion",
    "ConfigurationError",
    "ConnectError",
    "ContextOverflowError",
    "CucaClient",
    "CucaError",
    "CucaPlugin",
    "DeadlineExceeded",
    "FallbackClient",
    "GeminiThinkingParams",
    "HttpContextOverflowError",
    "HttpStatusError",
    "ImageBase64",
    "JsonError",
    "LoggedTurn",
    "McpError",
    "LlamaCppConfig",
    "LlamaRoute",
    "LocalModel",
    "LoopObserver",
    "MessageRole",
    "ModelInfo",
    "OpenAiApi",
    "OpenAiConfig",
    "OpenAiThinkingParams",
    "OutputSchema",
    "OutputValidationError",
    "PluginError",
    "PoolPolicy",
    "PromptCache",
    "PromptCacheUsage",
    "RateLimitError",
    "ReadTimeout",
    "ProviderEndpoint",
    "RedactRequest",
    "ProviderError",
    "PendingResponse",
    "ResponseStream",
    "RetryPolicy",
    "SessionLog",
    "SamplingConfig",
    "ServerError",
    "SseParseError",
    "StreamIncomplete",
    "Step",
    "TemplateError",
    "Text",
    "Thinking",
    "ThinkingConfig",
    "ThinkingEffort",
    "ThinkingParams",
    "Timeouts",
    "TokenCount",
    "TokenUsage",
    "ToolCall",
    "Tool",
    "ToolCallError",
    "ToolLoopError",
    "ArgumentProblem",
    "Attempt",
    "PartialObject",
    "Approval",
    "ApprovalEvent",
    "ToolDefinition",
    "ToolFailed",
    "ToolLoopStream",
    "ToolResult",
    "TransportError",
    "TurnOutcome",
    "TurnObserver",
    "TurnSummary",
    "UnifiedMessage",
    "UnifiedRequest",
    "UnifiedResponse",
    "converter",
    "from_json",
    "merge_blocks",
    "register_adapter",
    "structure",
    "to_json",
    "unstructure",
}

STAGES = {
    "CHUNK_HOOKS",
    "DECODE",
    "ENCODE",
    "ENGINE",
    "EncodedRequest",
    "EndOfTurn",
    "HTTP_PIPELINE",
    "HTTP_POINTS",
    "Insertion",
    "LOCAL_PIPELINE",
    "LOCAL_POINTS",
    "NamedStage",
    "OUTPUT_PARSE",
    "Pipeline",
    "Point",
    "REQUEST_HOOKS",
    "ResponseHead",
    "SSE_PARSE",
    "Redactor",
    "SseEvent",
    "SseParser",
    "Stage",
    "TRANSPORT",
    "after",
    "before",
    "map_items",
    "redact_text",
    "tap",
}


def test_exports_cuca() -> None:
    assert public(cuca) - {"__version__"} == CUCA


def test_exports_stages() -> None:
    assert public(cuca.stages) == STAGES


def test_exports_mcp() -> None:
    import cuca.mcp

    modules = {"connection", "content", "server", "stderr"}
    assert public(cuca.mcp) - modules == {"McpServer"} == set(cuca.mcp.__all__)


def test_exports_testing() -> None:
    names = set(dir(cuca.testing))
    assert {
        "Reply",
        "RecordedRequest",
        "ReplayServer",
        "open_replay_server",
        "chunkings",
        "chunk_sizes",
        "split_points",
        "feed_chunks",
        "logged_reply",
    } <= names


def test_exports_testing_conformance() -> None:
    import cuca.testing.conformance as kit

    assert {name for name in dir(kit) if not name.startswith("_")} == {
        "ANY_ID",
        "CHECKS",
        "ConformanceError",
        "Drop",
        "Failure",
        "Outcome",
        "Subject",
        "Transcript",
        "check_adapter",
        "conformance_test",
        "drive",
        "hops",
        "run_turn",
    }
