"""Run the Python examples of one Markdown page against a replay server (or the local
model), as a user would paste them: ``run_doc.py PAGE.md REPLAY_URL``.

The blocks of a page share one namespace, in order. A block may use top-level
``await``; a block that defines ``main`` without running it gets ``main`` run. Every
client is pointed at the replay server instead of the vendor's host, which is the only
thing changed from what the page shows. Blocks that define ``test_`` functions are run
by pytest instead (``tests/test_docs.py``).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import trio

import cuca
from cuca import CucaClient, ProviderEndpoint, UnifiedRequest
from cuca.engine import default_model_path

SUFFIX = {"openai": "/v1", "vllm": "/v1", "lm_studio": "/v1", "deepseek": "/v1",
          "anthropic": "/v1", "google_gemini": "", "llama_cpp": ""}


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def redirect(url: str) -> None:
    """Send every client's requests to ``url`` (the vendor hosts are not reachable);
    a custom endpoint keeps the URL its page gives it."""
    original = CucaClient.__init__

    def init(self: CucaClient, provider: ProviderEndpoint, **kwargs: Any) -> None:
        if provider != ProviderEndpoint.LOCAL and not provider.is_custom:
            target = url + SUFFIX[provider.kind]
            pool = kwargs.get("base_url")  # a pool's servers all become the replay server
            kwargs["base_url"] = [target] * len(pool) if isinstance(pool, list) else target
        original(self, provider, **kwargs)

    CucaClient.__init__ = init  # type: ignore[method-assign]


def namespace(url: str) -> dict[str, Any]:
    """What the fragments on the pages take as given."""
    ns: dict[str, Any] = {name: getattr(cuca, name) for name in dir(cuca) if name[0].isupper()}
    ns.update(
        trio=trio, key="sk-docs", anthropic_key="sk-ant-docs", gemini_key="AIza-docs",
        deepseek_key="sk-ds-docs", model="gpt-4o-mini", path=str(default_model_path()),
        schema={"type": "object", "properties": {"city": {"type": "string"}}},
        run=lambda call: "18C and sunny", chunks=[b"data: hello\n\n", b"data: world\n\n"],
        client=CucaClient(ProviderEndpoint.OPENAI),
        request=UnifiedRequest.new("gpt-4o-mini").add_user_message("Weather in Paris?"),
        base_url=url,
        server_script=str(Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"),
    )
    return ns


def run_block(source: str, ns: dict[str, Any], label: str) -> None:
    code = compile(source, label, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    if code.co_flags & inspect.CO_COROUTINE:
        async def top() -> None:
            await eval(code, ns)

        trio.run(top)
    else:
        exec(code, ns)
    main = ns.pop("main", None)
    if main is not None and "trio.run(" not in source:
        args = [ns["base_url"]] if inspect.signature(main).parameters else []
        trio.run(main, *args)


def main() -> None:
    page, url = Path(sys.argv[1]), sys.argv[2]
    redirect(url)
    ns = namespace(url)
    for index, block in enumerate(python_blocks(page)):
        if "def test_" in block:
            continue
        run_block(block, ns, f"{page.name}#{index}")
    print(f"ran {page.name}")


if __name__ == "__main__":
    main()
