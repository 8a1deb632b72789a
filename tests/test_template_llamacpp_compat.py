"""What llama.cpp's renderer adds to a template's variables, and cuca with it
(engine/llamacpp_compat.py): today's date, FireFunction's variables, and system text
folded into the first user turn for a template without a system role. The exact
prompts below were produced by ``llama-server --jinja`` for the same conversation
(tests/test_template_llama_server.py compares the whole corpus)."""

from __future__ import annotations

from datetime import datetime

import pytest
from support.corpus import template_corpus

from cuca import TemplateError, UnifiedRequest
from cuca.engine.llamacpp_compat import extra_variables, fold_system
from cuca.engine.template import ChatTemplate

CLOCK = lambda: datetime(2026, 11, 30, 12, 0)  # noqa: E731
CHAT = (
    UnifiedRequest.new("m")
    .add_system_message("You are terse.")
    .add_user_message("What is 2+2?")
    .add_assistant_message("4.")
    .add_user_message("And 3+3?")
)


def corpus_render(name: str, request: UnifiedRequest = CHAT) -> str:
    template = ChatTemplate(template_corpus()[name], bos_token="<s>", eos_token="</s>", clock=CLOCK)
    return template.render(request)


@pytest.mark.parametrize(
    "name", ["meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.3-70B-Instruct.jinja"]
)
def test_llama_3_dates_are_today(name: str) -> None:
    """Llama 3.1 and 3.3 print "Today Date: 26 Jul 2024" unless given date_string;
    llama.cpp passes today's date, and so does cuca."""
    rendered = corpus_render(name)
    assert "Today Date: 30 Nov 2026\n" in rendered
    assert "26 Jul 2024" not in rendered


def test_gemma_2_folds_the_system_text_into_the_first_user_turn() -> None:
    """Gemma 2 raises 'System role not supported'; llama.cpp renders the system text at
    the head of the first user turn, joined by a newline."""
    assert corpus_render("google-gemma-2-2b-it.jinja") == (
        "<s><start_of_turn>user\nYou are terse.\nWhat is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n4.<end_of_turn>\n"
        "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n"
    )


def test_gemma_2_without_a_system_message_is_unchanged() -> None:
    request = UnifiedRequest.new("m").add_user_message("Hi")
    rendered = corpus_render("google-gemma-2-2b-it.jinja", request)
    assert rendered == "<s><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_only_gemma_2_lacks_a_system_role_in_the_corpus() -> None:
    lacking = [
        name for name, source in template_corpus().items()
        if not ChatTemplate(source).has_system_role()
    ]  # fmt: skip
    assert lacking == ["google-gemma-2-2b-it.jinja"]


def test_firefunction_v2_gets_functions_and_datetime() -> None:
    """FireFunction v2 reads `functions` and `datetime`, which llama.cpp passes; without
    them it failed with "'functions' is undefined"."""
    rendered = corpus_render("fireworks-ai-llama-3-firefunction-v2.jinja")
    assert rendered.startswith("<s><|start_header_id|>system<|end_header_id|>\n\nYou are terse.\n")
    assert "Available functions as JSON spec:\n\nToday is Nov 30 2026.<|eot_id|>" in rendered
    assert rendered.endswith("And 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_firefunction_v2_lists_declared_tools_as_json() -> None:
    request = CHAT.add_tool("get_weather", "Get the weather", {"type": "object"})
    rendered = corpus_render("fireworks-ai-llama-3-firefunction-v2.jinja", request)
    assert '[\n  {\n    "type": "function",\n    "function": {\n      "name": "get_weather"' in (
        rendered
    )


def test_extra_variables_only_for_templates_that_read_them() -> None:
    now = datetime(2026, 1, 5)
    assert extra_variables(lambda name: False, now, None) == {}
    everything = extra_variables(lambda name: True, now, None)
    assert everything == {"date_string": "05 Jan 2026", "datetime": "Jan 05 2026", "functions": ""}


def test_fold_system_messages() -> None:
    system = {"role": "system", "content": "S1"}
    folded = fold_system(
        [
            system,
            {"role": "system", "content": "S2"},
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": "A"},
            {"role": "system", "content": "S3"},
            {"role": "assistant", "content": "B"},
            {"role": "user", "content": ""},
            {"role": "system", "content": "S4"},
        ]
    )
    assert folded == [
        {"role": "user", "content": "S1\nS2\nU"},
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "S3"},
        {"role": "assistant", "content": "B"},
        {"role": "user", "content": ""},
        {"role": "user", "content": "S4"},
    ]
    assert system == {"role": "system", "content": "S1"}  # the input is not changed


def test_a_template_that_refuses_a_conversation_still_says_so() -> None:
    """Folding changes what a template sees, not how its own errors surface."""
    source = "{{ raise_exception('no ' + messages[0].role) }}"
    with pytest.raises(TemplateError, match="no user"):
        ChatTemplate(source).render(CHAT)
