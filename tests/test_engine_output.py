"""The streaming output parser: every syntax, every split."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples

from cuca.engine.formats import OutputFormat, ToolSyntax
from cuca.engine.output import OutputParser, ParsedItem, format_markers, new_call_id
from cuca.errors import ToolCallError
from cuca.types import ProviderEndpoint, Text, Thinking, ToolCall

LOCAL = ProviderEndpoint.LOCAL

PLAIN = OutputFormat(reasoning=None)
THINK = OutputFormat()
HERMES = OutputFormat(tool_syntax=ToolSyntax.HERMES)
LLAMA3 = OutputFormat(reasoning=None, tool_syntax=ToolSyntax.LLAMA3_JSON)
MISTRAL = OutputFormat(reasoning=("[THINK]", "[/THINK]"), tool_syntax=ToolSyntax.MISTRAL)
OPEN_THINK = OutputFormat(tool_syntax=ToolSyntax.HERMES, starts_in_thinking=True)
FORMATS = (PLAIN, THINK, HERMES, LLAMA3, MISTRAL, OPEN_THINK)


def counter_ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"call_{next(counter):016x}"


def merge(items: Sequence[ParsedItem]) -> list[ParsedItem]:
    """Adjacent Text (and Thinking) deltas joined: the stream as a reader sees it."""
    merged: list[ParsedItem] = []
    for item in items:
        last = merged[-1] if merged else None
        if isinstance(item, Text) and isinstance(last, Text):
            merged[-1] = Text(last.text + item.text)
        elif isinstance(item, Thinking) and isinstance(last, Thinking):
            merged[-1] = Thinking(last.text + item.text, provider=LOCAL)
        else:
            merged.append(item)
    return merged


def parse(fmt: OutputFormat, pieces: Sequence[str], thinking: bool = True) -> list[ParsedItem]:
    parser = OutputParser(fmt, thinking_enabled=thinking, id_factory=counter_ids())
    items: list[ParsedItem] = []
    for piece in pieces:
        items += parser.feed(piece)
    items += parser.close()
    return merge(items)


def parse_all_ways(fmt: OutputFormat, text: str) -> list[ParsedItem]:
    """Parse whole and one character at a time; both must agree."""
    whole = parse(fmt, [text])
    assert parse(fmt, list(text)) == whole
    return whole


def call(n: int, name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=f"call_{n:016x}", name=name, arguments=arguments)


def malformed(body: str, n: int = 0, name: str | None = None) -> ToolCallError:
    """The item a broken call becomes: the n-th fresh id, the name if it can be read."""
    message = f"malformed tool call: {body}"
    return ToolCallError("local", message, tool_call_id=f"call_{n:016x}", name=name, raw=body)


def test_output_plain_text_is_emitted_as_it_arrives() -> None:
    parser = OutputParser(PLAIN, thinking_enabled=False)
    assert parser.feed("Hello") == [Text("Hello")]
    assert parser.feed(", world") == [Text(", world")]
    assert parser.close() == []


def test_output_possible_marker_prefix_is_held_back() -> None:
    parser = OutputParser(HERMES, thinking_enabled=False)
    assert parser.feed("a <tool") == [Text("a ")]
    assert parser.feed("box>") == [Text("<toolbox>")]
    assert parser.feed("<") == []
    assert parser.close() == [Text("<")]


def test_output_reasoning_block() -> None:
    items = parse_all_ways(THINK, "<think>\nLet me see.\n</think>\n\nThe answer.")
    assert items == [Thinking("\nLet me see.\n", provider=LOCAL), Text("The answer.")]


def test_output_reasoning_is_streamed_as_deltas() -> None:
    parser = OutputParser(THINK, thinking_enabled=True)
    assert parser.feed("<think>one") == [Thinking("one", provider=LOCAL)]
    assert parser.in_reasoning
    assert parser.feed(" two</thi") == [Thinking(" two", provider=LOCAL)]
    assert parser.feed("nk>x") == [Text("x")]
    assert not parser.in_reasoning


def test_output_starts_in_thinking() -> None:
    assert parse_all_ways(OPEN_THINK, "plan</think>done") == [
        Thinking("plan", provider=LOCAL),
        Text("done"),
    ]


def test_output_unterminated_reasoning_is_reasoning() -> None:
    assert parse_all_ways(THINK, "<think>still going") == [Thinking("still going", provider=LOCAL)]


def test_output_stray_end_marker_is_dropped() -> None:
    assert parse_all_ways(THINK, "a</think> b") == [Text("ab")]


def test_output_reasoning_markers_ignored_without_reasoning() -> None:
    assert parse_all_ways(PLAIN, "<think>x</think>") == [Text("<think>x</think>")]


def test_output_hermes_tool_calls() -> None:
    text = (
        'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        '</tool_call>\n<tool_call>{"name": "now", "arguments": "{}"}</tool_call>'
    )
    assert parse_all_ways(HERMES, text) == [
        Text("Let me check."),
        call(0, "get_weather", city="Paris"),
        call(1, "now"),
    ]


def test_output_hermes_malformed_call_and_stream_goes_on() -> None:
    text = "<tool_call>{not json}</tool_call>after <tool_call>[1]</tool_call>"
    assert parse_all_ways(HERMES, text) == [
        malformed("{not json}"),
        Text("after "),
        malformed("[1]", 1),
    ]


def test_output_hermes_unterminated_call_is_malformed() -> None:
    assert parse_all_ways(HERMES, '<tool_call>{"name": "f"') == [
        malformed('{"name": "f"', name="f")
    ]


def test_output_hermes_arguments_must_be_an_object() -> None:
    text = '<tool_call>{"name": "f", "arguments": [1]}</tool_call>'
    assert parse_all_ways(HERMES, text) == [malformed('{"name": "f", "arguments": [1]}', name="f")]


def test_output_tool_marker_inside_reasoning_is_reasoning() -> None:
    text = "<think>maybe <tool_call> later</think>ok"
    assert parse_all_ways(HERMES, text) == [
        Thinking("maybe <tool_call> later", provider=LOCAL),
        Text("ok"),
    ]


def test_output_llama3_bare_json_call() -> None:
    text = ' {"name": "search", "parameters": {"q": "trio"}}'
    assert parse_all_ways(LLAMA3, text) == [call(0, "search", q="trio")]


def test_output_llama3_several_calls_and_arguments_key() -> None:
    text = '{"name": "a", "arguments": {"x": 1}}; {"name": "b", "parameters": {}}'
    assert parse_all_ways(LLAMA3, text) == [call(0, "a", x=1), call(1, "b")]


def test_output_llama3_json_answer_that_is_not_a_call_is_text() -> None:
    for text in ('{"answer": 42} ok', '{"name": "x"} and text', "{braces} here"):
        assert parse_all_ways(LLAMA3, text) == [Text(text)]


def test_output_llama3_broken_call_is_malformed() -> None:
    assert parse_all_ways(LLAMA3, '{"name": "a", "parameters": {"x": }}') == [
        malformed('{"name": "a", "parameters": {"x": }}', name="a")
    ]


def test_output_llama3_json_only_at_answer_start() -> None:
    text = 'Use {"name": "a", "parameters": {}}'
    assert parse_all_ways(LLAMA3, text) == [Text(text)]


def test_output_llama3_python_tag() -> None:
    assert parse_all_ways(LLAMA3, '<|python_tag|>{"name": "f", "parameters": {"a": [1]}}') == [
        call(0, "f", a=[1])
    ]
    assert parse_all_ways(LLAMA3, '<|python_tag|>brave_search.call(query="cats")') == [
        call(0, "brave_search", query="cats")
    ]
    assert parse_all_ways(LLAMA3, "<|python_tag|>print(1)") == [malformed("print(1)")]


def test_output_mistral_list_and_args_forms() -> None:
    text = '[TOOL_CALLS][{"name": "a", "arguments": {"k": "v"}, "id": "abcdefghi"}]'
    assert parse_all_ways(MISTRAL, text) == [call(0, "a", k="v")]
    text = '[TOOL_CALLS]get[ARGS]{"city": "Rome"}[TOOL_CALLS]now[CALL_ID]x1[ARGS]{}'
    assert parse_all_ways(MISTRAL, text) == [call(0, "get", city="Rome"), call(1, "now")]


def test_output_mistral_reasoning_markers_from_format() -> None:
    assert parse_all_ways(MISTRAL, "[THINK]hm[/THINK]yes") == [
        Thinking("hm", provider=LOCAL),
        Text("yes"),
    ]


def test_output_mistral_malformed() -> None:
    assert parse_all_ways(MISTRAL, "[TOOL_CALLS]get[ARGS]{oops}") == [
        malformed("get[ARGS]{oops}", name="get")
    ]
    assert parse_all_ways(MISTRAL, "[TOOL_CALLS]no args here") == [malformed("no args here")]


def test_output_default_ids() -> None:
    assert re.fullmatch(r"call_[0-9a-f]{16}", new_call_id())
    parser = OutputParser(HERMES, thinking_enabled=False)
    (tool_call,) = parser.feed('<tool_call>{"name": "f"}</tool_call>')
    assert isinstance(tool_call, ToolCall)
    assert re.fullmatch(r"call_[0-9a-f]{16}", tool_call.id)


def test_output_format_markers() -> None:
    assert format_markers(PLAIN) == frozenset()
    assert format_markers(HERMES) == {"<think>", "</think>", "<tool_call>"}
    assert "[ARGS]" in format_markers(MISTRAL)


def test_output_reasoning_token_count() -> None:
    parser = OutputParser(THINK, thinking_enabled=True)
    pieces = ["<", "think", ">", "a", "", "b", "</think>", "\n", "c"]
    for piece in pieces:
        parser.feed(piece)
    parser.close()
    ends = list(itertools.accumulate(len(p) for p in pieces))
    assert parser.reasoning_spans == ((0, 17),)
    assert parser.reasoning_token_count(ends) == 7
    off = OutputParser(THINK, thinking_enabled=False)
    assert off.reasoning_token_count(ends) is None


def test_output_reasoning_token_count_open_block() -> None:
    parser = OutputParser(OPEN_THINK, thinking_enabled=True)
    for piece in ["x", "y", "</think>", "z"]:
        parser.feed(piece)
    parser.close()
    assert parser.reasoning_token_count([1, 2, 10, 11]) == 3


# -- property: any split gives the same blocks ---------------------------------------

FRAGMENTS = [
    "Hello",
    " world",
    "\n",
    "  ",
    "é",
    "日本",
    "<",
    ">",
    "{",
    "}",
    "[",
    "]",
    ";",
    '"',
    "<think>",
    "</think>",
    "<thi",
    "</",
    "[THINK]",
    "[/THINK]",
    "<tool_call>",
    "</tool_call>",
    "<tool_",
    '{"name": "f", "arguments": {"a": 1}}',
    '{"name": "g", "parameters": {"s": "}{"}}',
    '{"name": "h"',
    '{"answer": "x"}',
    "<|python_tag|>",
    "<|python",
    "[TOOL_CALLS]",
    "[TOOL_",
    "get[ARGS]",
    "[ARGS]",
    "[CALL_ID]",
    '[{"name": "m", "arguments": {}}]',
    'x.call(q="1")',
]


@st.composite
def text_and_split(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = "".join(draw(st.lists(st.sampled_from(FRAGMENTS), max_size=14)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=examples(300), deadline=None)
@given(fmt=st.sampled_from(FORMATS), case=text_and_split(), thinking=st.booleans())
def test_output_any_split_gives_the_same_blocks(
    fmt: OutputFormat, case: tuple[str, list[str]], thinking: bool
) -> None:
    text, pieces = case
    whole = parse(fmt, [text], thinking)
    assert parse(fmt, pieces, thinking) == whole
    if fmt.tool_syntax is ToolSyntax.LLAMA3_JSON:
        return  # a bare JSON answer that is not a call is text, whatever it holds
    markers = format_markers(fmt) - {"[ARGS]", "[CALL_ID]"}
    for item in whole:
        if isinstance(item, Text):
            assert not any(marker in item.text for marker in markers), item


@settings(max_examples=examples(200), deadline=None)
@given(case=text_and_split())
def test_output_reasoning_spans_do_not_depend_on_the_split(case: tuple[str, list[str]]) -> None:
    text, pieces = case
    spans = []
    for chunks in ([text], pieces):
        parser = OutputParser(OPEN_THINK, thinking_enabled=True)
        for chunk in chunks:
            parser.feed(chunk)
        parser.close()
        spans.append(parser.reasoning_spans)
    assert spans[0] == spans[1]
