"""``import cuca`` loads the core only; heavy packages load on first use.

Each check runs in a fresh interpreter, because this test process has long since
imported everything.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import cuca

HEAVY = (
    "jinja2",
    "llama_cpp",
    "cuca.engine",
    "cuca.providers",
    "cuca.cli",
    "sqlite3",
    "genai_prices",
    "opentelemetry",
    "msgspec",  # the stream decoders' JSON: loaded with the first adapter
    "cuca.mcp",  # the MCP extra: loaded only by ``import cuca.mcp``
    "mcp",
    "mcp_types",
)
NAMING = {"cuca.providers", "cuca.providers.table"}
"""What naming the endpoints needs: the provider table (pure data) and its package."""


def loaded_after(code: str) -> set[str]:
    """The modules in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)}


def test_imports_cuca_and_its_core_names_load_no_engine_adapter_or_cli() -> None:
    code = (
        "import cuca\n"
        "[getattr(cuca, n) for n in dir(cuca) if n[0] != '_' and n not in cuca._LAZY]"
    )
    modules = loaded_after(code)
    assert "cuca.client" in modules  # the core did load
    assert heavy(modules) <= NAMING


OPTIONAL = (
    "cuca.convert",
    "cuca.routing.fallback",
    "cuca.observe",
    "cuca.routing.pool",
    "cuca.observers.redaction",
    "cuca.retry",
    "cuca.tools.loop",
    "cuca.tools.tool",
    "secrets",
)
"""Modules a first program's names do not need: they load when their names are used."""


def test_imports_a_first_programs_names_load_nothing_optional() -> None:
    modules = loaded_after("from cuca import CucaClient, ProviderEndpoint, Text, UnifiedRequest")
    assert modules & set(OPTIONAL) == set()
    modules = loaded_after("import cuca\ncuca.FallbackClient, cuca.Tool, cuca.RetryPolicy")
    assert {"cuca.routing.fallback", "cuca.tools.tool", "cuca.retry"} <= modules


def test_imports_a_lazy_name_loads_its_package_on_first_use() -> None:
    modules = loaded_after("import cuca\ncuca.LocalModel")
    assert {"cuca.engine", "jinja2"} <= modules
    modules = loaded_after("from cuca import AnthropicConfig")
    assert "cuca.providers.anthropic.encode" in modules
    assert "cuca.engine" not in modules


def test_imports_an_openai_turn_loads_only_its_adapter() -> None:
    """The registry loads the one adapter a client uses."""
    code = (
        "from cuca import CucaClient, ProviderEndpoint\n"
        "CucaClient(ProviderEndpoint.OPENAI, api_key='k').adapter()"
    )
    modules = loaded_after(code)
    assert "cuca.providers.chat.encode" in modules
    assert heavy(modules) <= {
        "cuca.providers",
        "cuca.providers.base",
        "cuca.providers.registry",
        "cuca.providers.table",
        "cuca.providers.chat.encode",
        "cuca.providers.chat.family",
        "cuca.providers.chat.decode",
        "cuca.stages.framing",
        "cuca.providers.decoding",
        # small helpers every OpenAI-shaped adapter uses: which API, structured output,
        # non-streamed responses
        "cuca.providers.chat.config",
        "cuca.providers.chat.whole",
        "cuca.providers.whole_response",
        # the vendors' context-overflow answers, recognised at the error boundary
        "cuca.providers.overflow",
        "cuca.providers.chat.overflow",
        "cuca.providers.chat",
        "cuca.providers.anthropic",
        "cuca.providers.anthropic.overflow",
        "cuca.providers.gemini",
        "cuca.providers.gemini.overflow",
        # the rate-limit headers the wire's answers carry, read for the turn's gates
        "cuca.providers.headers",
        # stop, seed, top_p and tool_choice checked against what each wire can do
        "cuca.providers.controls",
        "cuca.providers.chat.ratelimit",
        # the chunk structs' decoder, with the submodules msgspec always loads
        *(m for m in modules if m == "msgspec" or m.startswith("msgspec.")),
    }


def test_imports_errors_from_a_provider_module_run_nothing_heavy() -> None:
    """``from cuca.errors import ...`` (as every adapter does) runs the root package,
    which must stay light."""
    modules = loaded_after("from cuca.errors import ProviderError")
    assert heavy(modules) <= NAMING


def test_imports_lazy_names_are_visible_to_dir_and_to_type_checkers() -> None:
    """Every lazy name is listed by dir(cuca), resolves, and is imported in the
    ``TYPE_CHECKING`` block of cuca/__init__.py from the module ``_LAZY`` names."""
    assert set(cuca._LAZY) <= set(dir(cuca))
    for name, module in cuca._LAZY.items():
        assert getattr(cuca, name) is getattr(importlib.import_module(module), name)
    tree = ast.parse(Path(cuca.__file__).read_text())
    checked: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom)
                for alias in stmt.names:
                    checked[alias.name] = f"cuca.{stmt.module}"
    assert checked == cuca._LAZY


def test_imports_session_log_prices_and_traces_load_on_first_use() -> None:
    """sqlite3 with the session log, genai-prices with the first cost, OpenTelemetry
    only with cuca.observers.otel."""
    modules = loaded_after("import cuca\ncuca.SessionLog")
    assert {"cuca.observers.session_log", "sqlite3"} <= modules
    assert not {m for m in modules if m.startswith(("genai_prices", "opentelemetry"))}
    code = (
        "from cuca import ProviderEndpoint, TokenUsage, UnifiedResponse\n"
        "UnifiedResponse(ProviderEndpoint.OPENAI, 'gpt-4o', TokenUsage(1, 1)).cost"
    )
    assert "genai_prices" in loaded_after(code)
    assert "opentelemetry.trace" in loaded_after("import cuca.observers.otel")
