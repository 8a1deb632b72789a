"""Differential: the engine's jinja2 rendering against llama.cpp's own renderer.

For every template of the 70-template corpus, a real ``llama-server --jinja
--chat-template-file F`` (SmolLM2 135M, one thread, a 256-token context, no warmup)
renders the same conversation through ``POST /apply-template``, with thinking off and
on, and cuca's ``ChatTemplate`` (given the server's own ``bos_token`` and ``eos_token``)
must write the same prompt, byte for byte.

llama-server takes its template at startup only (``/apply-template`` and ``POST /props``
ignore a template in the body), so there is one server per template; two start at a
time and each answers both renderings. The servers run with ``--no-reasoning-preserve``,
the seed's ``preserve_thinking`` false; what llama.cpp's default changes is checked
separately, on the templates that read it. Where the seed decides otherwise, the
difference is asserted to be exactly that decision (docs/local-models.md lists them).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from support.corpus import TEMPLATES, corpus_params, template_corpus
from support.llama_server import running_llama_server

from cuca import ProviderEndpoint, TemplateError, Thinking, ToolCall, UnifiedRequest
from cuca.engine.template import ChatTemplate

pytestmark = pytest.mark.slow

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And 3+3?"},
]
REQUEST = (
    UnifiedRequest.new("m")
    .add_system_message("You are terse.")
    .add_user_message("What is 2+2?")
    .add_assistant_message("4.")
    .add_user_message("And 3+3?")
)
# A tool conversation with thinking on (issue 29 §5): a system message, a question, an
# assistant turn with reasoning and a call to a declared tool, its result, a follow-up.
# The arguments go to llama.cpp as an object: seed 000, "Tool call arguments stay JSON
# objects".
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city",
            "parameters": WEATHER,
        },
    }
]
REASONING = "I should call get_weather for Rome."
TOOL_CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Rome?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": REASONING,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Rome"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 22}'},
    {"role": "user", "content": "And in Paris?"},
]
TOOL_REQUEST = (
    UnifiedRequest.new("m")
    .add_system_message("You are terse.")
    .add_user_message("Weather in Rome?")
    .add_assistant_message(
        [
            Thinking(REASONING, provider=ProviderEndpoint.LOCAL),
            ToolCall("call_1", "get_weather", {"city": "Rome"}),
        ]
    )
    .add_tool_result("call_1", '{"temperature_c": 22}')
    .add_user_message("And in Paris?")
)
TOOL_MODES = [(tools, thinking) for tools in (True, False) for thinking in (False, True)]
# FireFunction v2 reads its tools from `functions` only. This llama-server no longer
# passes that variable (llama.cpp dropped its FireFunction handler), so its prompt shows
# an empty line where the tools belong and the model cannot see them; cuca passes them,
# as seed 000's "tools reaches the template" means (docs/local-models.md).
FUNCTIONS_DIFFER = {"fireworks-ai-llama-3-firefunction-v2.jinja"}
LEAN = ["--jinja", "--no-warmup", "-c", "256", "--fit", "off"]
SEED_VARIABLES = ["--no-reasoning-preserve"]
# Seed 000: "A disabled or missing thinking sets both to false." Kimi K3 reads `thinking`
# (true when undefined) and llama.cpp passes only `enable_thinking`: with thinking off,
# llama.cpp's prompt thinks, cuca's does not.
SEED_THINKING = {("Kimi-K3.jinja", False)}
# Seed 000: "preserve_thinking is always false." llama-server preserves reasoning by
# default (--reasoning-preserve): `preserve_thinking` true, `drop_thinking` false.
PRESERVING = [
    "LFM2.5-8B-A1B.jinja",
    "deepseek-ai-DeepSeek-V4-Flash-0731.jinja",
    "deepseek-ai-DeepSeek-V4.jinja",
    "poolside-Laguna-S-2.1.jinja",
]
PRESERVE_VARIABLES = {"preserve_thinking": True, "drop_thinking": False}

Rendered = dict[str, Any]  # bos_token, eos_token, and the prompt (None: refused) per mode


def llama_render(name: str, flags: Sequence[str]) -> Rendered:
    """Start llama-server with template ``name`` and render the conversation twice."""
    args = [*LEAN, "--chat-template-file", str(TEMPLATES / name), *flags]
    with running_llama_server(args) as server:
        props = httpx.get(f"{server.url}/props", timeout=30).json()
        out: Rendered = {"bos_token": props["bos_token"], "eos_token": props["eos_token"]}
        for thinking in (False, True):
            body = {"messages": CONVERSATION, "chat_template_kwargs": {"enable_thinking": thinking}}
            reply = httpx.post(f"{server.url}/apply-template", json=body, timeout=60)
            out[str(thinking)] = reply.json()["prompt"] if reply.status_code == 200 else None
        for tools, thinking in TOOL_MODES:
            body = {
                "messages": TOOL_CONVERSATION,
                "chat_template_kwargs": {"enable_thinking": thinking},
                **({"tools": TOOLS} if tools else {}),
            }
            reply = httpx.post(f"{server.url}/apply-template", json=body, timeout=60)
            prompt = reply.json()["prompt"] if reply.status_code == 200 else None
            out[f"tools={tools} thinking={thinking}"] = prompt
    return out


def render_all(names: Sequence[str], flags: Sequence[str]) -> dict[str, Rendered]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(names, pool.map(lambda n: llama_render(n, flags), names), strict=True))


@pytest.fixture(scope="module")
def llama_cpp() -> dict[str, Rendered]:
    return render_all(corpus_params(), SEED_VARIABLES)


@pytest.fixture(scope="module")
def llama_cpp_preserving() -> dict[str, Rendered]:
    return render_all(PRESERVING, [])


def ours(name: str, rendered: Rendered) -> ChatTemplate:
    source = template_corpus()[name]
    return ChatTemplate(source, bos_token=rendered["bos_token"], eos_token=rendered["eos_token"])


def cuca_render(template: ChatTemplate, variables: dict[str, Any]) -> str | None:
    try:
        return template.render_variables(variables)
    except TemplateError:
        return None


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("name", corpus_params())
def test_template_renders_as_llama_cpp(
    llama_cpp: dict[str, Rendered], name: str, thinking: bool
) -> None:
    """Seed 000: "The prompt is rendered with add_generation_prompt true", through the
    model's own template: the prompt is the one llama.cpp writes for the same
    conversation and variables."""
    rendered = llama_cpp[name]
    template = ours(name, rendered)
    variables = template.variables(REQUEST.set_thinking(thinking))
    theirs = rendered[str(thinking)]
    assert theirs is not None, f"llama.cpp refused {name}"
    if (name, thinking) in SEED_THINKING:
        assert cuca_render(template, variables) != theirs
        del variables["thinking"]  # what llama.cpp passes instead
    assert cuca_render(template, variables) == theirs


@pytest.mark.parametrize(("tools", "thinking"), TOOL_MODES)
@pytest.mark.parametrize("name", corpus_params())
def test_template_renders_a_tool_conversation_as_llama_cpp(
    llama_cpp: dict[str, Rendered], name: str, tools: bool, thinking: bool
) -> None:
    """A tool conversation with reasoning (issue 29 §5), tools declared or not, thinking
    on or off: the prompt is llama.cpp's, including what its handlers reshape (gpt-oss's
    analysis channel of the tool-calling turn, Gemma 4's tool_responses, functionary's
    plain-text JSON). A template llama.cpp refuses for it, cuca refuses too."""
    rendered = llama_cpp[name]
    template = ours(name, rendered)
    request = TOOL_REQUEST.set_thinking(thinking)
    if tools:
        request = request.add_tool("get_weather", "Get the weather for a city", WEATHER)
    variables = template.variables(request)
    theirs = rendered[f"tools={tools} thinking={thinking}"]
    if (name, thinking) in SEED_THINKING:
        del variables["thinking"]  # what llama.cpp passes instead (see above)
    mine = cuca_render(template, variables)
    if tools and name in FUNCTIONS_DIFFER:
        assert theirs is not None and mine is not None
        assert mine == theirs.replace(
            "JSON spec:\n\n", "JSON spec:\n" + variables["functions"] + "\n"
        )
        return
    if theirs is None:
        assert mine is None, f"llama.cpp refused {name}, cuca rendered it"
        return
    assert mine == theirs


@pytest.mark.parametrize("name", PRESERVING)
def test_llama_cpp_default_preserves_reasoning_where_the_seed_does_not(
    llama_cpp_preserving: dict[str, Rendered], name: str
) -> None:
    """Seed 000: "preserve_thinking is always false." llama-server's default differs in
    exactly these variables, on the templates that read them."""
    rendered = llama_cpp_preserving[name]
    template = ours(name, rendered)
    for thinking in (False, True):
        variables = template.variables(REQUEST.set_thinking(thinking))
        assert variables["preserve_thinking"] is False
        variables.update(PRESERVE_VARIABLES)
        assert cuca_render(template, variables) == rendered[str(thinking)]


def test_the_preserving_templates_are_those_that_read_the_variables() -> None:
    readers = [
        name for name, source in template_corpus().items()
        if any(ChatTemplate(source).reads(v) for v in ("preserve_thinking", "drop_thinking"))
    ]  # fmt: skip
    assert readers == PRESERVING
