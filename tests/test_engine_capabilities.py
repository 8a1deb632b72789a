"""Family detection, capabilities and the per-request output format, over the corpus."""

from __future__ import annotations

import pytest
from support.corpus import corpus_params, corpus_template, smollm2_template, template_corpus

from cuca.engine.families import detect_family, ends_in_reasoning, find_markers
from cuca.engine.formats import Capabilities, OutputFormat, ToolSyntax
from cuca.engine.template import ChatTemplate
from cuca.types import UnifiedRequest

THINK = ("<think>", "</think>")
R1_QWEN = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
R1_LLAMA = "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"
QWEN3 = "Qwen-Qwen3-0.6B.jinja"


def ask(thinking: bool | None = None) -> UnifiedRequest:
    return UnifiedRequest.new("m").add_user_message("Hi").set_thinking(thinking)


@pytest.fixture(scope="session")
def corpus() -> dict[str, str]:
    return template_corpus()


@pytest.mark.parametrize("name", corpus_params())
def test_capabilities_every_corpus_template_has_them(name: str) -> None:
    template = corpus_template(name)
    capabilities = template.capabilities()
    assert isinstance(capabilities, Capabilities)
    assert capabilities.can_disable_thinking == template.reads("enable_thinking")
    assert capabilities.tools == (template.family.tool_syntax is not None)


# name: (reasoning, can_disable_thinking, tools)
KNOWN = {
    QWEN3: (True, True, True),
    "Qwen-QwQ-32B.jinja": (True, True, True),
    "Qwen-Qwen2.5-7B-Instruct.jinja": (False, False, True),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": (False, False, True),
    R1_LLAMA: (True, False, False),
    R1_QWEN: (True, True, False),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": (False, False, True),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": (False, False, True),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": (False, False, True),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": (True, False, True),
    "Qwen3-Coder.jinja": (False, False, False),
    "google-gemma-2-2b-it.jinja": (False, False, False),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": (True, True, False),
    "microsoft-Phi-3.5-mini-instruct.jinja": (False, False, False),
    "openai-gpt-oss-120b.jinja": (True, False, True),
}


@pytest.mark.parametrize(("name", "expected"), sorted(KNOWN.items()))
def test_capabilities_table(corpus: dict[str, str], name: str, expected: tuple[bool, ...]) -> None:
    reasoning, can_disable, tools = expected
    assert corpus_template(name).capabilities() == Capabilities(reasoning, can_disable, tools)


def test_capabilities_smollm2_supports_nothing() -> None:
    assert ChatTemplate(smollm2_template()).capabilities() == Capabilities(False, False, False)


def test_capabilities_r1_distill_qwen_copy_reads_enable_thinking(corpus: dict[str, str]) -> None:
    template = corpus_template(R1_QWEN)
    assert template.reads("enable_thinking")
    assert not corpus_template(R1_LLAMA).reads("enable_thinking")
    assert not corpus_template(R1_LLAMA).reads("thinking")


def test_capabilities_reasoning_from_an_opening_generation_prompt() -> None:
    # No marker in the source: the generation prompt opens the block at run time.
    source = (
        "{{ messages[-1].content }}{% if add_generation_prompt %}{{ '<' ~ 'think>' }}{% endif %}"
    )
    template = ChatTemplate(source)
    assert template.family.reasoning is None
    assert template.capabilities().reasoning
    assert template.output_format(ask()) == OutputFormat(THINK, None, True)


def test_capabilities_survive_a_template_that_always_raises() -> None:
    template = ChatTemplate("{{ raise_exception('no') }}")
    assert template.capabilities() == Capabilities(False, False, False)


# -- families ---------------------------------------------------------------------------

FAMILIES = {
    QWEN3: ("hermes", ToolSyntax.HERMES, THINK),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": ("hermes", ToolSyntax.HERMES, None),
    "Qwen3-Coder.jinja": ("qwen3-coder", None, None),
    "Qwen3.5-4B.jinja": ("qwen3-coder", None, THINK),
    "GLM-4.6.jinja": ("glm", None, THINK),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("llama3", ToolSyntax.LLAMA3_JSON, None),
    "meetkai-functionary-medium-v3.1.jinja": ("functionary-v3.1", None, None),
    "meetkai-functionary-medium-v3.2.jinja": ("functionary-v3.2", None, None),
    "fireworks-ai-llama-3-firefunction-v2.jinja": ("firefunction", None, None),
    "unsloth-mistral-Devstral-Small-2507.jinja": ("mistral", ToolSyntax.MISTRAL, None),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": (
        "mistral",
        ToolSyntax.MISTRAL,
        ("[THINK]", "[/THINK]"),
    ),
    R1_QWEN: ("deepseek-r1", None, THINK),
    "ByteDance-Seed-OSS.jinja": ("seed-oss", None, ("<seed:think>", "</seed:think>")),
    "MiniMax-M2.jinja": ("minimax", None, THINK),
    "openai-gpt-oss-120b.jinja": (
        "gpt-oss",
        ToolSyntax.HARMONY,
        ("<|channel|>analysis<|message|>", "<|end|>"),
    ),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": (
        "command-r",
        None,
        ("<|START_THINKING|>", "<|END_THINKING|>"),
    ),
    "google-gemma-4-31B-it.jinja": ("generic", None, ("<|channel>thought", "<channel|>")),
    "unsloth-Apriel-1.5.jinja": ("apriel", None, ("<thinking>", "</thinking>")),
}


@pytest.mark.parametrize(("name", "expected"), sorted(FAMILIES.items()))
def test_families_detected(corpus: dict[str, str], name: str, expected: tuple[object, ...]) -> None:
    family = detect_family(corpus[name])
    assert (family.name, family.tool_syntax, family.reasoning) == expected


def test_families_smollm2_is_plain_chatml() -> None:
    family = detect_family(smollm2_template())
    assert (family.name, family.tool_syntax, family.reasoning) == ("chatml", None, None)


def test_families_end_marker_alone_counts_only_for_closing_tags() -> None:
    assert find_markers("{{ content.split('</think>')[-1] }}") == THINK
    assert find_markers("<|user|>hi<|end|>") is None


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("<|im_start|>assistant\n<think>\n", True),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
        ("<think>a</think>b<think>", True),
        ("<|im_start|>assistant\n", False),
        ("", False),
    ],
)
def test_families_ends_in_reasoning(prompt: str, expected: bool) -> None:
    assert ends_in_reasoning(prompt, THINK) is expected


# -- the output format of a request ------------------------------------------------------


def test_output_format_r1_distill_qwen_follows_the_request() -> None:
    template = corpus_template(R1_QWEN)
    assert template.output_format(ask(True)) == OutputFormat(THINK, None, True)
    assert template.output_format(ask(False)) == OutputFormat(THINK, None, False)


@pytest.mark.parametrize("thinking", [True, False, None])
def test_output_format_r1_distill_llama_always_thinks(thinking: bool | None) -> None:
    template = corpus_template(R1_LLAMA)
    assert template.output_format(ask(thinking)) == OutputFormat(THINK, None, True)


@pytest.mark.parametrize("thinking", [True, False])
def test_output_format_qwen3_lets_the_model_open_the_block(thinking: bool) -> None:
    # On: the model writes <think> itself. Off: the prompt holds a closed, empty block.
    template = corpus_template(QWEN3)
    assert template.output_format(ask(thinking)) == OutputFormat(THINK, ToolSyntax.HERMES, False)


def test_output_format_qwq_opens_the_block() -> None:
    template = corpus_template("Qwen-QwQ-32B.jinja")
    assert template.output_format(ask(True)).starts_in_thinking


def test_output_format_llama3() -> None:
    template = corpus_template("meta-llama-Llama-3.1-8B-Instruct.jinja")
    assert template.output_format(ask()) == OutputFormat(None, ToolSyntax.LLAMA3_JSON, False)


def test_output_format_without_request_uses_a_default_conversation() -> None:
    template = ChatTemplate(smollm2_template())
    assert template.output_format() == OutputFormat(None, None, False)
    assert corpus_template(R1_LLAMA).output_format().starts_in_thinking


def test_output_format_generation_prompt_is_the_suffix() -> None:
    template = corpus_template(R1_QWEN)
    assert template.generation_prompt(ask(True)) == "<｜Assistant｜><think>\n"
    assert template.generation_prompt(ask(False)) == "<｜Assistant｜><think>\n</think>"
