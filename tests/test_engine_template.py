"""Chat-template rendering: request translation, the helpers real templates call, exact
prompts of known models, and every template of the llama.cpp corpus.

Expected prompts are written out by hand from the templates, the way Hugging Face
transformers' ``apply_chat_template`` renders them.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest
from support.corpus import corpus_params, corpus_template, smollm2_template, template_corpus

from cuca.engine.families import ends_in_reasoning, find_markers
from cuca.engine.formats import OutputFormat
from cuca.engine.template import ChatTemplate, ToolArguments, template_variables
from cuca.errors import ConfigurationError, TemplateError
from cuca.types import (
    ImageBase64,
    MessageRole,
    ProviderEndpoint,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    UnifiedMessage,
    UnifiedRequest,
)

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def chat() -> UnifiedRequest:
    """A plain two-turn conversation."""
    return (
        UnifiedRequest.new("m")
        .add_system_message("You are a helpful assistant.")
        .add_user_message("What is the capital of France?")
        .add_assistant_message("Paris.")
        .add_user_message("And of Italy?")
    )


def tool_chat(call_id: str = "call12345") -> UnifiedRequest:
    """A tool declared, called by the assistant and answered (the id suits Mistral)."""
    call = ToolCall(call_id, "get_weather", {"city": "Paris"})
    return (
        UnifiedRequest.new("m")
        .add_system_message("You are a helpful assistant.")
        .add_user_message("Weather in Paris?")
        .add_tool("get_weather", "Get the weather", WEATHER_SCHEMA)
        .add_assistant_message([Thinking("I need the weather."), call])
        .add_tool_result(call_id, "18C, sunny", name="get_weather")
    )


def render(source: str, request: UnifiedRequest | None = None, **kwargs: Any) -> str:
    return ChatTemplate(source, **kwargs).render(request or chat())


@pytest.fixture(scope="session")
def corpus() -> dict[str, str]:
    return template_corpus()


# -- request -> variables -------------------------------------------------------------


def test_template_variables_messages_by_role() -> None:
    request = (
        UnifiedRequest.new("m")
        .add_system_message([Text("Be"), Text("brief.")])
        .add_user_message([Text("Hi"), Text("there")])
        .add_assistant_message([Thinking("Greet "), Thinking("back."), Text("Hello!")])
    )
    assert template_variables(request)["messages"] == [
        {"role": "system", "content": "Be\nbrief."},
        {"role": "user", "content": "Hi\nthere"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."},
    ]


def test_template_variables_tool_calls_and_results() -> None:
    variables = template_variables(tool_chat("call_1"))
    assistant, tool = variables["messages"][2:]
    assert assistant == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "I need the weather.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    }
    assert isinstance(assistant["tool_calls"][0]["function"]["arguments"], dict)
    assert tool == {
        "role": "tool",
        "tool_call_id": "call_1",
        "name": "get_weather",
        "content": "18C, sunny",
    }


def test_template_variables_tool_message_id_from_first_result() -> None:
    message = UnifiedMessage(
        MessageRole.TOOL, (ToolResult("call_a", "one"), ToolResult("call_b", "two"))
    )
    request = UnifiedRequest.new("m").add_message(message)
    assert template_variables(request)["messages"] == [
        {"role": "tool", "tool_call_id": "call_a", "content": "one\ntwo"}
    ]


def test_template_variables_tools_only_when_declared() -> None:
    assert "tools" not in template_variables(chat())
    tools = template_variables(tool_chat())["tools"]
    assert tools == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the weather",
                "parameters": WEATHER_SCHEMA,
            },
        }
    ]


@pytest.mark.parametrize(("thinking", "expected"), [(None, False), (False, False), (True, True)])
def test_template_variables_thinking_flags_are_explicit_bools(
    thinking: bool | None, expected: bool
) -> None:
    variables = template_variables(chat().set_thinking(thinking))
    assert variables["enable_thinking"] is expected
    assert variables["thinking"] is expected
    assert variables["preserve_thinking"] is False
    assert variables["add_generation_prompt"] is True


def test_template_variables_special_tokens() -> None:
    variables = template_variables(chat(), bos_token="<s>", eos_token="</s>")
    assert (variables["bos_token"], variables["eos_token"]) == ("<s>", "</s>")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}),
        (None, {}),
        ('{"a": 1}', {"a": 1}),
    ],
)
def test_template_arguments_accepted_as_objects(arguments: Any, expected: Any) -> None:
    call = ToolCall("c1", "f", arguments)
    request = UnifiedRequest.new("m").add_assistant_message(call)
    message = template_variables(request)["messages"][0]
    assert message["tool_calls"][0]["function"]["arguments"] == expected


# seed 000: "An object, null or a string holding an object is accepted; anything else
# fails the request": the empty and the blank string too
@pytest.mark.parametrize("arguments", ["[1, 2]", "42", "not json", [1, 2], 3.5, "null", "", " "])
def test_template_arguments_that_are_not_objects_fail_the_request(arguments: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"ToolCall\.arguments"):
        ToolCall("c1", "f", arguments)  # refused where it is built, before any render
    request = UnifiedRequest.new("m").add_assistant_message(ToolCall("c1", "f", {"x": {1, 2}}))
    with pytest.raises(ConfigurationError, match=r"tool call 'c1' \(f\) arguments are not JSON"):
        template_variables(request)


def test_template_image_fails_the_request() -> None:
    request = UnifiedRequest.new("m").add_user_message([Text("Look"), ImageBase64("image/png", "")])
    with pytest.raises(ConfigurationError, match="text only: message 0 has an image"):
        ChatTemplate(smollm2_template()).render(request)


def test_template_variables_are_copies_of_the_request() -> None:
    source = "{% set _ = messages[0].tool_calls[0].function.arguments.update({'x': 1}) %}ok"
    call = ToolCall("c1", "f", {"a": 1})
    request = UnifiedRequest.new("m").add_assistant_message(call)
    assert ChatTemplate(source).render(request) == "ok"
    assert dict(call.arguments) == {"a": 1}


# -- the environment HF templates expect ----------------------------------------------


def test_template_raise_exception_message_is_the_error() -> None:
    source = "{{ raise_exception('Conversation roles must alternate user/assistant') }}"
    with pytest.raises(TemplateError) as info:
        render(source)
    assert str(info.value) == "template error: Conversation roles must alternate user/assistant"


def test_template_strftime_now_reads_the_clock() -> None:
    clock = lambda: datetime(2025, 1, 2, 15, 4)  # noqa: E731
    assert render("{{ strftime_now('%d %b %Y %H:%M') }}", clock=clock) == "02 Jan 2025 15:04"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("{'b': 'é', 'a': [1, 2]} | tojson", '{"b": "é", "a": [1, 2]}'),
        ("{'é': 1} | tojson(ensure_ascii=True)", '{"\\u00e9": 1}'),
        ("{'b': 1, 'a': 2} | tojson(sort_keys=true)", '{"a": 2, "b": 1}'),
        ("{'a': 1} | tojson(separators=(',', ':'))", '{"a":1}'),
        ("{'a': [1]} | tojson(indent=2)", '{\n  "a": [\n    1\n  ]\n}'),
        ("'<b>&' | tojson", '"<b>&"'),
        ("[{'n': 1}, {'n': 2}] | map(attribute='n') | tojson", "[1, 2]"),
        ("{'a': 1}.items() | tojson", '[["a", 1]]'),
    ],
)
def test_template_tojson_like_hf(expression: str, expected: str) -> None:
    assert render("{{ " + expression + " }}") == expected


def test_template_tojson_of_declared_tools_via_map() -> None:
    source = "{{ tools | map(attribute='function') | map(attribute='name') | list | tojson }}"
    assert render(source, tool_chat()) == '["get_weather"]'


def test_template_namespace_and_loop_controls() -> None:
    source = (
        "{% set ns = namespace(n=0, seen=[]) %}"
        "{% for m in messages %}"
        "{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{% if m.role == 'assistant' %}{% break %}{% endif %}"
        "{% set ns.n = ns.n + 1 %}{% set _ = ns.seen.append(m.role) %}"
        "{% endfor %}{{ ns.n }} {{ ns.seen | join(',') }} {{ loop is defined }}"
    )
    assert render(source) == "1 user False"


def test_template_trim_and_lstrip_blocks_as_hf() -> None:
    source = (
        "{% for m in messages %}\n"
        "    {% if m.role != 'assistant' %}\n"
        "[{{ m.content }}]\n"
        "    {% endif %}\n"
        "{% endfor %}\n"
    )
    assert render(source) == (
        "[You are a helpful assistant.]\n[What is the capital of France?]\n[And of Italy?]\n"
    )


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("'  x  '.strip() ~ '|' ~ ' x '.lstrip() ~ '|' ~ ' x '.rstrip()", "x|x | x"),
        ("'a,b,c'.split(',') | join('+')", "a+b+c"),
        ("'<think>x'.startswith('<think>') ~ 'x</think>'.endswith('</think>')", "TrueTrue"),
        ("'aXa'.replace('a', 'b') ~ 'ab'.upper() ~ 'AB'.lower() ~ 'ab cd'.title()", "bXbABabAb Cd"),
        (
            "{'a': 1}.items() | list ~ {'a': 1}.keys() | list ~ {'a': 1}.values() | list",
            "[('a', 1)]['a'][1]",
        ),
        ("{'a': 1}.get('a') ~ {'a': 1}.get('b', 'none')", "1none"),
    ],
)
def test_template_string_and_dict_methods(expression: str, expected: str) -> None:
    assert render("{{ " + expression + " }}") == expected


def test_template_list_methods_mutate_template_lists() -> None:
    source = (
        "{% set l = [1, 2] %}"
        "{% set _ = l.append(3) %}{% set _ = l.extend([4, 5]) %}{% set _ = l.insert(0, 0) %}"
        "{% set last = l.pop() %}{% set _ = l.remove(2) %}{{ l }} {{ last }}"
        "{% set d = {} %}{% set _ = d.update({'k': 'v'}) %} {{ d }}"
    )
    assert render(source) == "[0, 1, 3, 4] 5 {'k': 'v'}"


def test_template_generation_tag_renders_its_body() -> None:
    source = "{% for m in messages %}{% generation %}{{ m.role[0] }}{% endgeneration %}{% endfor %}"
    assert (
        render(source, UnifiedRequest.new("m").add_user_message("Hi").add_assistant_message("Yo"))
        == "ua"
    )


def test_template_from_json_filter() -> None:
    assert render("{{ ('{\"a\": [1]}' | from_json).a[0] }}") == "1"


def test_template_string_arguments_concatenate_as_json() -> None:
    # compact, as llama.cpp writes an object joined to a string (functionary v3.2)
    source = "{{ '>>>' + messages[0].tool_calls[0].function.arguments + '<<<' }}"
    request = UnifiedRequest.new("m").add_assistant_message(ToolCall("c", "f", {"q": "é", "n": 1}))
    assert render(source, request) == '>>>{"q":"é","n":1}<<<'
    assert ToolArguments({"a": 1}) == {"a": 1}


def test_template_safe_filter_escapes_nothing() -> None:
    """functionary v3.1 writes ``"..."|safe + tool | tojson``: jinja2's Markup escaped
    the JSON joined to it (``&#34;name&#34;``); llama.cpp writes plain quotes."""
    assert render("""{{ "a '"|safe + '{"k": "<v>"}' }}""") == """a '{"k": "<v>"}"""


def test_template_gpt_oss_gets_the_reasoning_as_thinking() -> None:
    """gpt-oss's template reads ``thinking``: a tool-calling turn's reasoning reaches
    its analysis channel (seed 004: reasoning survives the round trip), as llama.cpp's
    gpt-oss handler passes it, and that turn's content is left out."""
    source = (
        "<|channel|>{% for m in messages %}{{ m.role }}:"
        "{{ m.thinking | default('-') }}:{{ 'content' in m }};{% endfor %}"
    )
    request = UnifiedRequest.new("m").add_user_message("Rome?").add_assistant_message(
        [Thinking("call it", provider=ProviderEndpoint.LOCAL), ToolCall("c", "f", {})]
    )
    assert render(source, request) == "<|channel|>user:-:True;assistant:call it:False;"


def test_template_gemma4_tool_results_ride_on_the_assistant_turn() -> None:
    """The older Gemma 4 templates read a model turn's ``tool_responses``: the results
    after a tool-calling turn (parsed when JSON) and the answer after them become that
    one turn, as llama.cpp's ``convert_tool_responses_gemma4`` does."""
    source = (
        "{#'<|tool_call>call:'#}{% for m in messages %}{{ m.role }}"
        "{{ m.tool_responses | default('') | tojson }}{{ m.content | default('') }};"
        "{% endfor %}"
    )
    request = (
        UnifiedRequest.new("m")
        .add_user_message("Rome?")
        .add_assistant_message([ToolCall("c", "get_weather", {"city": "Rome"})])
        .add_tool_result("c", '{"c": 22}')
        .add_assistant_message("22 C.")
        .add_user_message("Paris?")
    )
    assert render(source, request) == (
        'user""Rome?;assistant[{"name": "get_weather", "response": {"c": 22}}]22 C.;user""Paris?;'
    )


def test_template_syntax_error_names_the_line() -> None:
    with pytest.raises(TemplateError, match=r"template error: line 2: .*endfor"):
        ChatTemplate("{% for m in messages %}\n{{ m }}\n")


def test_template_runtime_error_names_the_line() -> None:
    with pytest.raises(TemplateError, match=r"line 3: TypeError"):
        render("a\nb\n{{ messages[0] + 1 }}")


def test_template_undefined_prints_empty_like_hf() -> None:
    assert render("[{{ documents }}][{{ messages[0].nothing }}]") == "[][]"


def test_template_reads_reports_undeclared_variables() -> None:
    template = ChatTemplate(
        "{% set x = 1 %}{{ x }}{% if enable_thinking %}{{ bos_token }}{% endif %}"
    )
    assert template.reads("enable_thinking")
    assert template.reads("bos_token")
    assert not template.reads("x")
    assert not template.reads("tools")


def test_template_source_is_kept() -> None:
    assert ChatTemplate("{{ 1 }}").source == "{{ 1 }}"


# -- exact prompts of known models ----------------------------------------------------


def test_template_smollm2_exact() -> None:
    expected = (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\nParis.<|im_end|>\n"
        "<|im_start|>user\nAnd of Italy?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert ChatTemplate(smollm2_template()).render(chat()) == expected


def test_template_smollm2_adds_its_default_system_prompt() -> None:
    request = UnifiedRequest.new("m").add_user_message("Hi")
    expected = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
        "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert ChatTemplate(smollm2_template()).render(request) == expected


def test_template_smollm2_without_generation_prompt() -> None:
    rendered = ChatTemplate(smollm2_template()).render(chat(), add_generation_prompt=False)
    assert rendered.endswith("<|im_start|>user\nAnd of Italy?<|im_end|>\n")


QWEN3_CHAT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\nParis.<|im_end|>\n"
    "<|im_start|>user\nAnd of Italy?<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_template_qwen3_exact_thinking_on(corpus: dict[str, str]) -> None:
    template = ChatTemplate(corpus["Qwen-Qwen3-0.6B.jinja"])
    assert template.render(chat().set_thinking(True)) == QWEN3_CHAT


@pytest.mark.parametrize("thinking", [False, None])
def test_template_qwen3_exact_thinking_off(corpus: dict[str, str], thinking: bool | None) -> None:
    template = ChatTemplate(corpus["Qwen-Qwen3-0.6B.jinja"])
    rendered = template.render(chat().set_thinking(thinking))
    assert rendered == QWEN3_CHAT + "<think>\n\n</think>\n\n"


def test_template_qwen3_exact_tools(corpus: dict[str, str]) -> None:
    expected = (
        "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "get_weather", "description": "Get the '
        'weather", "parameters": {"type": "object", "properties": {"city": {"type": '
        '"string"}}, "required": ["city"]}}}\n</tools>\n\n'
        "For each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nI need the weather.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n18C, sunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    template = ChatTemplate(corpus["Qwen-Qwen3-0.6B.jinja"])
    assert template.render(tool_chat().set_thinking(True)) == expected


LLAMA31_CHAT = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
    "You are a helpful assistant.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nParis.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nAnd of Italy?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)


def test_template_llama31_exact(corpus: dict[str, str]) -> None:
    # Llama 3.1 prints a fixed 26 Jul 2024 unless given date_string: cuca passes today's
    # date, as llama.cpp does (the clock is pinned).
    source = corpus["meta-llama-Llama-3.1-8B-Instruct.jinja"]
    clock = lambda: datetime(2025, 3, 9)  # noqa: E731
    rendered = render(source, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", clock=clock)
    assert rendered == LLAMA31_CHAT.format(date="09 Mar 2025")


def test_template_llama32_exact_with_pinned_clock(corpus: dict[str, str]) -> None:
    # Llama 3.2 asks strftime_now for today's date: the clock is pinned.
    source = corpus["meta-llama-Llama-3.2-3B-Instruct.jinja"]
    clock = lambda: datetime(2025, 3, 9)  # noqa: E731
    rendered = render(source, bos_token="<|begin_of_text|>", clock=clock)
    assert rendered == LLAMA31_CHAT.format(date="09 Mar 2025")


def test_template_llama31_exact_tools(corpus: dict[str, str]) -> None:
    expected = (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Environment: ipython\nCutting Knowledge Date: December 2023\n"
        "Today Date: 09 Mar 2025\n\nYou are a helpful assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n"
        "Given the following functions, please respond with a JSON for a function call "
        "with its proper arguments that best answers the given prompt.\n\n"
        'Respond in the format {"name": function name, "parameters": dictionary of '
        "argument name and its value}.Do not use variables.\n\n"
        "{\n"
        '    "type": "function",\n'
        '    "function": {\n'
        '        "name": "get_weather",\n'
        '        "description": "Get the weather",\n'
        '        "parameters": {\n'
        '            "type": "object",\n'
        '            "properties": {\n'
        '                "city": {\n'
        '                    "type": "string"\n'
        "                }\n"
        "            },\n"
        '            "required": [\n'
        '                "city"\n'
        "            ]\n"
        "        }\n"
        "    }\n"
        "}\n\n"
        "Weather in Paris?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
        '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'
        "<|start_header_id|>ipython<|end_header_id|>\n\n"
        '"18C, sunny"<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    source = corpus["meta-llama-Llama-3.1-8B-Instruct.jinja"]
    clock = lambda: datetime(2025, 3, 9)  # noqa: E731
    assert render(source, tool_chat(), bos_token="<|begin_of_text|>", clock=clock) == expected


R1_BOS = "<｜begin▁of▁sentence｜>"
R1_CHAT = (
    R1_BOS + "You are a helpful assistant.<｜User｜>What is the capital of France?"
    "<｜Assistant｜>Paris.<｜end▁of▁sentence｜><｜User｜>And of Italy?<｜Assistant｜><think>\n"
)


def test_template_deepseek_r1_distill_qwen_exact(corpus: dict[str, str]) -> None:
    source = corpus["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"]
    template = ChatTemplate(source, bos_token=R1_BOS, eos_token="<｜end▁of▁sentence｜>")
    assert template.render(chat().set_thinking(True)) == R1_CHAT
    assert template.render(chat().set_thinking(False)) == R1_CHAT + "</think>"


def test_template_deepseek_r1_distill_llama_exact(corpus: dict[str, str]) -> None:
    source = corpus["deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"]
    template = ChatTemplate(source, bos_token=R1_BOS)
    assert template.render(chat().set_thinking(True)) == R1_CHAT
    assert template.render(chat().set_thinking(False)) == R1_CHAT


def test_template_deepseek_r1_drops_past_reasoning(corpus: dict[str, str]) -> None:
    source = corpus["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"]
    request = (
        UnifiedRequest.new("m")
        .add_user_message("Hi")
        .add_assistant_message([Thinking("Greet."), Text("Hello!")])
        .add_user_message("Bye")
        .set_thinking(True)
    )
    expected = (
        "<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜>"
        "<｜User｜>Bye<｜Assistant｜><think>\n"
    )
    assert ChatTemplate(source).render(request) == expected


# -- the corpus -----------------------------------------------------------------------

# Templates that refuse every conversation below, with the template's own reason: none
# since Gemma 2 (no system role) gets its system text folded into the first user turn
# and FireFunction v2 its ``functions`` and ``datetime``, as llama.cpp renders them
# (tests/test_template_llamacpp_compat.py).
REFUSES_ALL: dict[str, str] = {}
# Templates that refuse OpenAI-style tool definitions.
REFUSES_TOOLS = {
    # (Command R+ joins a parameter's missing description to a string: the empty string,
    # as llama.cpp renders it; tests/test_template_llama_server.py compares the prompt)
    # Gemma 2 has no tool role: its roles must alternate user/assistant.
    "google-gemma-2-2b-it.jinja": "Conversation roles must alternate",
}


# Templates that leave out part of a tool conversation, by design of the model's format.
NO_TOOL_DEFINITIONS = {
    # SmolLM3 lists tools from its own ``xml_tools``/``python_tools`` variables.
    "HuggingFaceTB-SmolLM3-3B.jinja",
    # The R1 distills and DeepSeek V3.1 render no tool list (V3.1 and the Qwen distill
    # render the names of the tools called, not their descriptions).
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
    # No tool support at all: tool calls and results are dropped.
    "llama-cpp-rwkv-world.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
}
NO_TOOL_CALLS = NO_TOOL_DEFINITIONS - {
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
}
NO_TOOL_RESULTS = {"llama-cpp-rwkv-world.jinja", "microsoft-Phi-3.5-mini-instruct.jinja"}


def check(name: str, request: UnifiedRequest, refused: dict[str, str]) -> None:
    """The template renders the conversation (or refuses it with its own reason): the last
    user message, and for a tool conversation the tool's definition, the call and the
    result, unless the model's format leaves them out (listed above)."""
    template = corpus_template(name)
    if name in refused:
        with pytest.raises(TemplateError, match=refused[name]):
            template.render(request)
        return
    rendered = template.render(request)
    user_text = [m.text() for m in request.messages if m.role is MessageRole.USER][-1]
    assert user_text in rendered
    if not request.tools:
        return
    definition = request.tools[0].description
    assert (definition in rendered) is (name not in NO_TOOL_DEFINITIONS), "tool definition"
    assert ("get_weather" in rendered) is (name not in NO_TOOL_CALLS), "tool call"
    assert ("18C, sunny" in rendered) is (name not in NO_TOOL_RESULTS), "tool result"


def test_template_corpus_is_complete(corpus: dict[str, str]) -> None:
    assert len(corpus) >= 70
    assert {"Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"} <= set(corpus)


@pytest.mark.parametrize("name", corpus_params())
def test_template_corpus_renders_plain_chat(name: str) -> None:
    check(name, chat(), REFUSES_ALL)


@pytest.mark.parametrize("name", corpus_params())
def test_template_corpus_renders_tool_chat(name: str) -> None:
    check(name, tool_chat(), REFUSES_ALL | REFUSES_TOOLS)


@pytest.mark.parametrize("name", corpus_params())
@pytest.mark.parametrize("thinking", [True, False])
def test_template_corpus_renders_thinking(name: str, thinking: bool) -> None:
    check(name, chat().set_thinking(thinking), REFUSES_ALL)


# firefunction v2 cannot render a plain chat at all: it needs a non-standard
# ``functions`` variable (its refusal is asserted by the corpus tests above)
FLAG_PARAMS = [p for p in corpus_params() if "firefunction" not in str(p)]


@pytest.mark.parametrize("name", FLAG_PARAMS)
def test_template_corpus_thinking_flag_reaches_readers_only(name: str) -> None:
    # A template that reads enable_thinking or thinking renders differently with it; one
    # that reads neither renders the same prompt either way.
    template = corpus_template(name)
    request = UnifiedRequest.new("m").add_user_message("Hi")
    on = template.render(request.set_thinking(True))
    off = template.render(request.set_thinking(False))
    if template.reads("enable_thinking") or template.reads("thinking"):
        assert on != off
    else:
        assert on == off


def test_template_gemma2_renders_without_system(corpus: dict[str, str]) -> None:
    request = UnifiedRequest.new("m").add_user_message("Hi").add_assistant_message("Hello")
    rendered = render(corpus["google-gemma-2-2b-it.jinja"], request, bos_token="<bos>")
    expected = (
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    assert rendered == expected


@pytest.mark.parametrize(
    "name",
    ["mistralai-Mistral-Nemo-Instruct-2407.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja"],
)
def test_template_mistral_gets_nine_character_call_ids(corpus: dict[str, str], name: str) -> None:
    """Mistral's templates accept only 9 alphanumeric characters as a call id; the
    engine's own ``call_`` + 16 hex ids map to a stable digest, call and result alike."""
    from cuca.engine.template import mistral_call_id

    long_id = "call_0123456789abcdef"
    rendered = render(corpus[name], tool_chat(long_id))
    short = mistral_call_id(long_id)
    assert len(short) == 9 and short.isalnum()
    assert long_id not in rendered
    assert rendered.count(short) >= 2  # on the call and on its result
    assert mistral_call_id("abcDEF123") == "abcDEF123"  # ids that fit are kept


def test_template_kimi_appends_to_its_lists(corpus: dict[str, str]) -> None:
    # Kimi K2 calls list.append on tool conversations: the sandbox must allow it.
    source = corpus["Kimi-K2-Instruct.jinja"]
    assert ".append(" in source
    assert "get_weather" in render(source, tool_chat())


def test_template_functionary_v32_gets_string_arguments(corpus: dict[str, str]) -> None:
    rendered = render(corpus["meetkai-functionary-medium-v3.2.jinja"], tool_chat())
    assert '>>>get_weather\n{"city":"Paris"}' in rendered


# -- one rendering per turn -------------------------------------------------------------

ONE_PASS_REQUESTS = {
    "plain": chat(),
    "thinking": chat().set_thinking(True),
    "no thinking": chat().set_thinking(False),
    "tools": tool_chat(),
}


@pytest.mark.parametrize("name", FLAG_PARAMS)
@pytest.mark.parametrize("kind", sorted(ONE_PASS_REQUESTS))
def test_template_render_turn_agrees_with_two_renderings(name: str, kind: str) -> None:
    """``render_turn`` renders once and finds the generation prompt where the template
    last tested ``add_generation_prompt``; on every corpus template it gives the prompt
    of ``render`` and the output format that rendering twice and comparing gives."""
    template = corpus_template(name)
    request = ONE_PASS_REQUESTS[kind]
    try:
        expected_text = template.render(request)
    except TemplateError as exc:
        with pytest.raises(TemplateError, match=re.escape(str(exc))):
            template.render_turn(request)
        return
    tail = template.generation_prompt(request)
    markers = template.family.reasoning or find_markers(tail)
    opened = markers is not None and ends_in_reasoning(tail, markers)
    turn = template.render_turn(request)
    assert turn.text == expected_text
    assert turn.output_format == OutputFormat(markers, template.family.tool_syntax, opened)


def test_template_render_turn_without_the_flag_has_no_generation_prompt() -> None:
    source = "{{ messages[-1]['content'] }}{% if add_generation_prompt %}<think>{% endif %}"
    template = ChatTemplate(source)
    assert template.render_turn(chat()).output_format.starts_in_thinking
    ignores = ChatTemplate("{{ messages[-1]['content'] }}<think>")
    assert not ignores.render_turn(chat()).output_format.starts_in_thinking  # a fixed suffix


def test_template_generation_flag_looks_like_true() -> None:
    source = (
        "{{ add_generation_prompt }}|{{ add_generation_prompt == true }}"
        "|{{ add_generation_prompt is defined }}|{{ not add_generation_prompt }}"
    )
    assert ChatTemplate(source).render_turn(chat()).text == "True|True|True|False"
