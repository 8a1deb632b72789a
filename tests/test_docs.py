"""Every Python example in the README and docs runs, against the replay server or the
local model: the docs stay true to the code."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from support.batch_servers import OpenAiBatchServer, Plan
from support.embedding_servers import gemini_embeddings, llama_embedding, openai_embeddings
from support.transcripts import TRANSCRIPTS, transcript

from cuca.testing import RecordedRequest, Reply, open_replay_server

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
PAGES = sorted(
    p for p in [ROOT / "README.md", *ROOT.glob("docs/**/*.md")]
    if "```python" in p.read_text()
)


BATCHES = OpenAiBatchServer(Plan(validating=0.0, running=0.0, finalizing=0.0))
"""OpenAI's batch routes, for docs/batches.md: a job that has ended when first polled."""


def answer(request: RecordedRequest) -> Reply:
    """Each wire gets a faithful transcript; a tool loop gets a call, then an answer."""
    path = request.path
    if path.startswith(("/v1/batches", "/v1/files")):
        return BATCHES.answer(request)
    if path.endswith("/embeddings"):
        return openai_embeddings(request)
    if path.endswith((":embedContent", ":batchEmbedContents")):
        return gemini_embeddings(request)
    if path.endswith("/embedding"):
        return llama_embedding(request)
    if path.endswith("/chat/completions"):
        body = request.json()
        if body.get("stream") is False:
            whole = (TRANSCRIPTS / "openai/text.json").read_bytes()
            return Reply(whole, headers=[("content-type", "application/json")])
        if body.get("response_format"):
            return Reply(transcript("openai/structured"))
        roles = [m.get("role") for m in body.get("messages", [])]
        wants_call = body.get("tools") and "tool" not in roles
        names = {tool["function"]["name"] for tool in body.get("tools", [])}
        call = "vllm/reasoning_tool_call" if "get_weather" in names else "openai/tool_call"
        return Reply(transcript(call if wants_call else "openai/text"))
    if path.endswith("/responses"):
        body = request.json()
        answered = any(i.get("type") == "function_call_output" for i in body["input"])
        wants_call = body.get("tools") and not answered
        name = "reasoning_two_tools" if wants_call else "final_answer"
        return Reply(transcript(f"openai_responses/{name}"))
    if path.endswith("/messages"):
        return Reply(transcript("anthropic/thinking"))
    if ":streamGenerateContent" in path:
        return Reply(transcript("gemini/text_signature"))
    if path.endswith("/completion"):
        return Reply(transcript("llama_cpp/completion"))
    return Reply(json.dumps({"error": f"no route {path}"}).encode(), status=404)


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
async def test_docs_examples_run(page: Path) -> None:
    async with open_replay_server(answer) as server:
        result = await trio.run_process(
            [sys.executable, str(SCRIPTS / "run_doc.py"), str(page), server.url],
            capture_stdout=True, capture_stderr=True, check=False,
        )
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, f"{page_id(page)} failed:\n{err[-3000:]}"
    assert f"ran {page.name}" in out


TEST_PAGES = [p for p in PAGES if re.search(r"^async def test_|^def test_", p.read_text(), re.M)]


@pytest.mark.parametrize("page", TEST_PAGES, ids=page_id)
def test_docs_test_examples_pass_under_pytest(page: Path, tmp_path: Path) -> None:
    """Pages that show tests (cuca.testing): their blocks, joined, pass under pytest."""
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    (tmp_path / "test_page.py").write_text("\n\n".join(blocks))
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout
