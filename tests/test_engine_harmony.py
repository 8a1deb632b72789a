"""gpt-oss's harmony format: analysis is Thinking, final is Text, commentary to a function
is a ToolCall, at every split of the output (I/O-free)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.corpus import corpus_template
from test_engine_output import merge

from cuca.engine.formats import Capabilities, OutputFormat, ToolSyntax
from cuca.engine.harmony import HARMONY_MARKERS, HarmonyParser
from cuca.engine.output import ParsedItem, format_markers, new_output_parser
from cuca.errors import ToolCallError
from cuca.types import ProviderEndpoint, Text, Thinking, ToolCall, UnifiedRequest

LOCAL = ProviderEndpoint.LOCAL

GPT_OSS = "openai-gpt-oss-120b.jinja"
HARMONY = OutputFormat(("<|channel|>analysis<|message|>", "<|end|>"), ToolSyntax.HARMONY)

REASON = "<|channel|>analysis<|message|>The user wants the weather. Call the tool.<|end|>"
CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris", "units": "C"}'
)  # <|call|> ends generation: the engine never passes it on
CALL_IN_ROLE = (
    "<|start|>assistant to=functions.get_time<|channel|>commentary json"
    '<|message|>{"zone": "CET"}'
)
ANSWER = "<|start|>assistant<|channel|>final<|message|>It is 18°C in Paris."


def parse(pieces: Sequence[str], thinking: bool = True) -> list[ParsedItem]:
    counter = itertools.count()
    parser = HarmonyParser(thinking_enabled=thinking, id_factory=lambda: f"call_{next(counter)}")
    items: list[ParsedItem] = []
    for piece in pieces:
        items += parser.feed(piece)
    items += parser.close()
    return merge(items)


def test_harmony_reasoning_then_a_call() -> None:
    assert parse([REASON + CALL]) == [
        Thinking("The user wants the weather. Call the tool.", provider=LOCAL),
        ToolCall("call_0", "get_weather", {"city": "Paris", "units": "C"}),
    ]


def test_harmony_reasoning_then_the_answer() -> None:
    assert parse([REASON + ANSWER]) == [
        Thinking("The user wants the weather. Call the tool.", provider=LOCAL),
        Text("It is 18°C in Paris."),
    ]


def test_harmony_recipient_in_the_role_part() -> None:
    assert parse([CALL_IN_ROLE]) == [ToolCall("call_0", "get_time", {"zone": "CET"})]


def test_harmony_commentary_without_recipient_is_text() -> None:
    text = "<|channel|>commentary<|message|>Let me check.<|end|>" + ANSWER
    assert parse([text]) == [Text("Let me check.It is 18°C in Paris.")]


def test_harmony_bad_arguments_are_an_error_item_and_parsing_goes_on() -> None:
    call = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops<|call|>"
    text = call + ANSWER
    items = parse([text])
    assert isinstance(items[0], ToolCallError)  # a ProviderError with what answers it
    assert "malformed tool call: functions.f {oops" in str(items[0])
    assert (items[0].name, items[0].raw) == ("f", "{oops") and items[0].tool_call_id
    assert items[1:] == [Text("It is 18°C in Paris.")]


def test_harmony_plain_text_without_headers_is_the_answer() -> None:
    assert parse(["Just text."]) == [Text("Just text.")]


def test_harmony_reasoning_tokens_are_counted() -> None:
    tokens = ["<|channel|>", "analysis", "<|message|>", "Hmm", ".", "<|end|>", "<|start|>"]
    tokens += ["assistant", "<|channel|>", "final", "<|message|>", "Hi", "!"]
    ends = list(itertools.accumulate(len(t) for t in tokens))
    parser = HarmonyParser(thinking_enabled=True)
    for token in tokens:
        parser.feed(token)
    parser.close()
    assert parser.reasoning_token_count(ends) == 6  # the analysis message, markers and all
    assert HarmonyParser(thinking_enabled=False).reasoning_token_count(ends) is None


@settings(max_examples=examples(60), deadline=None)
@given(st.data())
def test_harmony_any_split_gives_the_same_blocks(data: st.DataObject) -> None:
    text = REASON + CALL + "<|call|>" + REASON + ANSWER
    whole = parse([text])
    cuts = sorted(data.draw(st.sets(st.integers(1, len(text) - 1), max_size=30)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert parse(pieces) == whole
    assert parse(list(text)) == whole


def test_harmony_format_from_the_corpus_template() -> None:
    template = corpus_template(GPT_OSS)
    expected = Capabilities(reasoning=True, can_disable_thinking=False, tools=True)
    assert template.capabilities() == expected
    fmt = template.output_format(UnifiedRequest.new("m").add_user_message("Hi"))
    assert fmt.tool_syntax is ToolSyntax.HARMONY and not fmt.starts_in_thinking
    assert isinstance(new_output_parser(fmt, thinking_enabled=False), HarmonyParser)
    assert set(HARMONY_MARKERS) <= format_markers(fmt)  # the engine shows their text
