"""cuca: one request type and one typed stream for every LLM backend, on trio.

async with CucaClient(provider=ProviderEndpoint.OPENAI, api_key=key) as client:
    request = UnifiedRequest.new("gpt-4o-mini").add_user_message("Say hello.")
    async with client.generate_stream(request) as stream:
        async for item in stream:   # Text, Thinking, ToolCall, or a non-fatal CucaError
            ...
    print(stream.response.usage)

``import cuca`` loads the core only: types, errors, the client and its stream. Every
other name is imported the first time it is used: the local engine with jinja2
(``cuca.LocalModel``), the provider adapters (``cuca.AnthropicConfig``), and what a
first turn does not need (the tool loop, fallback and pools, observers, the JSON
converter, retry policies, the vendor-shaped bodies of ``cuca.from_openai`` and its
kin). Type checkers and ``dir(cuca)`` see every name either way.
To export a name lazily, add it to ``_LAZY`` and to the ``TYPE_CHECKING`` block (a test
checks that the two agree).
"""

import typing as _typing

from ._lazy import lazy_names as _lazy_names
from ._version import __version__ as __version__
from .client import CucaClient as CucaClient
from .client import PendingResponse as PendingResponse
from .errors import AuthenticationError as AuthenticationError
from .errors import BatchCancelled as BatchCancelled
from .errors import BatchError as BatchError
from .errors import BatchExpired as BatchExpired
from .errors import BatchFailed as BatchFailed
from .errors import BudgetExceeded as BudgetExceeded
from .errors import ConfigurationError as ConfigurationError
from .errors import ConnectError as ConnectError
from .errors import ContextOverflowError as ContextOverflowError
from .errors import CucaError as CucaError
from .errors import DeadlineExceeded as DeadlineExceeded
from .errors import HttpContextOverflowError as HttpContextOverflowError
from .errors import HttpStatusError as HttpStatusError
from .errors import JsonError as JsonError
from .errors import McpError as McpError
from .errors import OutputValidationError as OutputValidationError
from .errors import PluginError as PluginError
from .errors import ProviderError as ProviderError
from .errors import RateLimitError as RateLimitError
from .errors import RateLimitExceeded as RateLimitExceeded
from .errors import ReadTimeout as ReadTimeout
from .errors import ServerError as ServerError
from .errors import SseParseError as SseParseError
from .errors import StoreError as StoreError
from .errors import StreamIncomplete as StreamIncomplete
from .errors import TemplateError as TemplateError
from .errors import ToolCallError as ToolCallError
from .errors import ToolLoopError as ToolLoopError
from .errors import TransportError as TransportError
from .plugins import CucaPlugin as CucaPlugin
from .settings import Timeouts as Timeouts
from .stream import Attempt as Attempt
from .stream import Completion as Completion
from .stream import ResponseStream as ResponseStream
from .stream import merge_blocks as merge_blocks
from .types import AnthropicThinkingParams as AnthropicThinkingParams
from .types import Block as Block
from .types import CompactionReport as CompactionReport
from .types import FinishReason as FinishReason
from .types import GeminiThinkingParams as GeminiThinkingParams
from .types import ImageBase64 as ImageBase64
from .types import MessageRole as MessageRole
from .types import ModelInfo as ModelInfo
from .types import OpenAiThinkingParams as OpenAiThinkingParams
from .types import OutputSchema as OutputSchema
from .types import PromptCache as PromptCache
from .types import PromptCacheUsage as PromptCacheUsage
from .types import ProviderEndpoint as ProviderEndpoint
from .types import Text as Text
from .types import Thinking as Thinking
from .types import ThinkingConfig as ThinkingConfig
from .types import ThinkingEffort as ThinkingEffort
from .types import ThinkingParams as ThinkingParams
from .types import TokenCount as TokenCount
from .types import TokenUsage as TokenUsage
from .types import ToolCall as ToolCall
from .types import ToolChoice as ToolChoice
from .types import ToolChoiceMode as ToolChoiceMode
from .types import ToolDefinition as ToolDefinition
from .types import ToolResult as ToolResult
from .types import TurnSummary as TurnSummary
from .types import UnifiedMessage as UnifiedMessage
from .types import UnifiedRequest as UnifiedRequest
from .types import UnifiedResponse as UnifiedResponse

if _typing.TYPE_CHECKING:
    from .batches import BatchJob as BatchJob
    from .batches import BatchPolling as BatchPolling
    from .batches import BatchResults as BatchResults
    from .batches import BatchState as BatchState
    from .batches import BatchStatus as BatchStatus
    from .cache import ResponseCache as ResponseCache
    from .context import Compactor as Compactor
    from .convert import converter as converter
    from .convert import from_json as from_json
    from .convert import structure as structure
    from .convert import to_json as to_json
    from .convert import unstructure as unstructure
    from .embeddings import Embeddings as Embeddings
    from .engine import Capabilities as Capabilities
    from .engine import LocalModel as LocalModel
    from .engine import SamplingConfig as SamplingConfig
    from .limits import Budget as Budget
    from .limits import RateLimiter as RateLimiter
    from .observers.redaction import RedactRequest as RedactRequest
    from .observers.session_log import LoggedTurn as LoggedTurn
    from .observers.session_log import SessionLog as SessionLog
    from .partial import PartialObject as PartialObject
    from .plugins import ApprovalEvent as ApprovalEvent
    from .plugins import BudgetWarning as BudgetWarning
    from .plugins import LoopObserver as LoopObserver
    from .plugins import TurnObserver as TurnObserver
    from .plugins import TurnOutcome as TurnOutcome
    from .providers.anthropic.encode import AnthropicConfig as AnthropicConfig
    from .providers.anthropic.sdk import from_anthropic as from_anthropic
    from .providers.anthropic.sdk import to_anthropic as to_anthropic
    from .providers.chat.config import OpenAiApi as OpenAiApi
    from .providers.chat.config import OpenAiConfig as OpenAiConfig
    from .providers.chat.sdk import from_openai as from_openai
    from .providers.chat.sdk import to_openai as to_openai
    from .providers.llamacpp.encode import LlamaCppConfig as LlamaCppConfig
    from .providers.llamacpp.encode import LlamaRoute as LlamaRoute
    from .providers.registry import register_adapter as register_adapter
    from .retry import RetryPolicy as RetryPolicy
    from .routing.fallback import FallbackClient as FallbackClient
    from .routing.pool import PoolPolicy as PoolPolicy
    from .store import MemoryStore as MemoryStore
    from .store import RedisStore as RedisStore
    from .store import SqliteStore as SqliteStore
    from .tools.approval import Approval as Approval
    from .tools.loop import Step as Step
    from .tools.loop import ToolLoopStream as ToolLoopStream
    from .tools.tool import ArgumentProblem as ArgumentProblem
    from .tools.tool import Tool as Tool
    from .tools.tool import ToolFailed as ToolFailed
    from .vectors import EmbeddingError as EmbeddingError

_LAZY: dict[str, str] = {
    "BatchJob": "cuca.batches",
    "BatchPolling": "cuca.batches",
    "BatchResults": "cuca.batches",
    "BatchState": "cuca.batches",
    "BatchStatus": "cuca.batches",
    "Compactor": "cuca.context",
    "converter": "cuca.convert",
    "from_json": "cuca.convert",
    "structure": "cuca.convert",
    "to_json": "cuca.convert",
    "unstructure": "cuca.convert",
    "Embeddings": "cuca.embeddings",
    "EmbeddingError": "cuca.vectors",
    "FallbackClient": "cuca.routing.fallback",
    "Budget": "cuca.limits",
    "BudgetWarning": "cuca.plugins",
    "RateLimiter": "cuca.limits",
    "ResponseCache": "cuca.cache",
    "MemoryStore": "cuca.store",
    "RedisStore": "cuca.store",
    "SqliteStore": "cuca.store",
    "TurnOutcome": "cuca.plugins",
    "TurnObserver": "cuca.plugins",
    "PoolPolicy": "cuca.routing.pool",
    "RedactRequest": "cuca.observers.redaction",
    "RetryPolicy": "cuca.retry",
    "LoopObserver": "cuca.plugins",
    "Step": "cuca.tools.loop",
    "ArgumentProblem": "cuca.tools.tool",
    "Approval": "cuca.tools.approval",
    "ApprovalEvent": "cuca.plugins",
    "PartialObject": "cuca.partial",
    "ToolLoopStream": "cuca.tools.loop",
    "Tool": "cuca.tools.tool",
    "ToolFailed": "cuca.tools.tool",
    "Capabilities": "cuca.engine",
    "LocalModel": "cuca.engine",
    "SamplingConfig": "cuca.engine",
    "AnthropicConfig": "cuca.providers.anthropic.encode",
    "from_anthropic": "cuca.providers.anthropic.sdk",
    "to_anthropic": "cuca.providers.anthropic.sdk",
    "from_openai": "cuca.providers.chat.sdk",
    "to_openai": "cuca.providers.chat.sdk",
    "LlamaCppConfig": "cuca.providers.llamacpp.encode",
    "LlamaRoute": "cuca.providers.llamacpp.encode",
    "OpenAiApi": "cuca.providers.chat.config",
    "OpenAiConfig": "cuca.providers.chat.config",
    "register_adapter": "cuca.providers.registry",
    "LoggedTurn": "cuca.observers.session_log",
    "SessionLog": "cuca.observers.session_log",
}
"""Names resolved on first use: name -> the module that defines it."""


__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())
