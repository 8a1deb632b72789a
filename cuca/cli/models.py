"""``cuca models inspect PATH``: what the engine reads from a GGUF file.

Only the metadata is read (:func:`cuca.engine.gguf.read_metadata`), never the
weights, so inspecting a large model is instant. The chat template is compiled in the
engine's sandbox and analysed exactly as :meth:`LocalModel.capabilities` would.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from cuca.errors import CucaError, TemplateError

from .config import EXIT_ERROR, EXIT_OK
from .console import Console

__all__ = ["ModelFile", "inspect_gguf", "run_models"]


@attrs.frozen
class ModelFile:
    """The facts ``models inspect`` prints.

    ``template_family`` is ``None`` when the file has no chat template;
    ``capabilities`` is ``None`` then, and when the template does not compile
    (``template_error`` says why).
    """

    path: str
    name: str | None
    architecture: str | None
    size_label: str | None
    context_length: int | None
    template_family: str | None
    reasoning_markers: tuple[str, str] | None
    tool_syntax: str | None
    capabilities: Mapping[str, bool] | None
    template_error: str | None = None


def _token(metadata: Mapping[str, Any], key: str) -> str:
    """The text of the special token whose id is at ``key`` ("" if absent)."""
    tokens = metadata.get("tokenizer.ggml.tokens")
    index = metadata.get(key)
    if isinstance(tokens, list) and isinstance(index, int) and 0 <= index < len(tokens):
        return str(tokens[index])
    return ""


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def inspect_gguf(path: Path) -> ModelFile:
    """Read ``path``'s metadata and analyse its chat template.

    Raises :class:`~cuca.errors.ConfigurationError` when the file is missing or not a
    valid GGUF file.
    """
    from cuca.engine.gguf import read_metadata
    from cuca.engine.template import ChatTemplate

    metadata = read_metadata(path)
    arch = _str(metadata.get("general.architecture"))
    context = metadata.get(f"{arch}.context_length") if arch else None
    facts: dict[str, Any] = {
        "path": str(path),
        "name": _str(metadata.get("general.name")),
        "architecture": arch,
        "size_label": _str(metadata.get("general.size_label")),
        "context_length": context if isinstance(context, int) else None,
        "template_family": None,
        "reasoning_markers": None,
        "tool_syntax": None,
        "capabilities": None,
    }
    source = _str(metadata.get("tokenizer.chat_template"))
    if source and source.strip():
        bos = _token(metadata, "tokenizer.ggml.bos_token_id")
        eos = _token(metadata, "tokenizer.ggml.eos_token_id")
        try:
            template = ChatTemplate(source, bos_token=bos, eos_token=eos)
        except TemplateError as error:
            return ModelFile(**facts, template_error=str(error))
        family = template.family
        facts["template_family"] = family.name
        facts["reasoning_markers"] = family.reasoning
        facts["tool_syntax"] = family.tool_syntax.value if family.tool_syntax else None
        facts["capabilities"] = attrs.asdict(template.capabilities())
    return ModelFile(**facts)


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def describe(info: ModelFile) -> list[str]:
    """``info`` as aligned ``label: value`` lines for people."""
    missing = "unknown"
    lines = [
        ("file", info.path),
        ("name", info.name or missing),
        ("architecture", info.architecture or missing),
        ("size", info.size_label or missing),
        ("context length", str(info.context_length or missing)),
    ]
    if info.template_error is not None:
        lines.append(("chat template", "invalid"))
    elif info.template_family is None:
        lines.append(("chat template", "none (pass --chat-template-file to cuca chat)"))
    else:
        markers = info.reasoning_markers
        lines += [
            ("template family", info.template_family),
            ("reasoning markers", " ".join(markers) if markers else "none"),
            ("tool syntax", info.tool_syntax or "none"),
        ]
    if info.capabilities is not None:
        lines += [(name, _yes(value)) for name, value in info.capabilities.items()]
    width = max(len(label) for label, _ in lines)
    return [f"{label + ':':<{width + 1}} {value}" for label, value in lines]


def run_models(args: argparse.Namespace, console: Console) -> int:
    """``cuca models inspect PATH [--json]``."""
    try:
        info = inspect_gguf(Path(args.path).expanduser())
    except CucaError as error:
        from .turn import exit_status

        console.error(str(error))
        return exit_status(error)
    if args.json:
        record = attrs.asdict(info)  # tuples become lists
        console.out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        console.out.write("\n".join(describe(info)) + "\n")
    console.out.flush()
    if info.template_error is not None:
        console.error(info.template_error)
        return EXIT_ERROR
    return EXIT_OK
