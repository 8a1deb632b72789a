"""A ``serve.toml`` route with the features a client is configured with in code (issue
34 §2): a fallback over other routes, a pool of servers, compaction. Each backend is a
scripted server of its wire on loopback (``cuca.testing``); the server is built from the
file as ``cuca serve --config`` builds it (``load_spec``, ``open_backends``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from cuca.context import Compactor
from cuca.errors import ConfigurationError
from cuca.routing.fallback import FallbackClient
from cuca.serve import ServeApp, serve
from cuca.serve.build import open_backends
from cuca.serve.config import load_spec
from cuca.testing import ScriptedError, ScriptedTurn, open_scripted_server
from cuca.types import TokenUsage

ENV = {"OPENAI_API_KEY": "sk-up", "ANTHROPIC_API_KEY": "sk-ant-up"}
WAIT = 60  # seconds: a hang fails the test, no verdict depends on it


@asynccontextmanager
async def served_from(config: Path, text: str) -> AsyncIterator[str]:
    """``cuca serve --config`` over ``text``: the server's URL for the block."""
    config.write_text(text)
    spec = load_spec(config, ENV)
    async with open_backends(spec) as backends, trio.open_nursery() as nursery:
        url = await nursery.start(serve, ServeApp(backends, secrets=spec.secrets()), "127.0.0.1", 0)
        yield url
        nursery.cancel_scope.cancel()


def ask(model: str, *messages: str) -> dict[str, object]:
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(messages or ("hi",))
    ]
    return {"model": model, "messages": turns}


async def test_serve_route_fallback_moves_a_failed_turn_to_the_next_route(tmp_path: Path) -> None:
    """What the user sees: ``fallback = ["backup"]`` on a route whose backend answers
    503 gets the answer of the route named next (an Anthropic backend here, sent its own
    model name), in the wire the client spoke; the failing backend was asked once."""
    async with (
        open_scripted_server([ScriptedError(503, "overloaded")], "chat") as down,
        open_scripted_server(["from the backup"], "anthropic") as backup,
    ):
        config = (
            f'[models."smart"]\nprovider = "openai"\nbase_url = "{down.base_url}"\n'
            'retries = 0\nfallback = ["backup"]\n\n'
            f'[models."backup"]\nprovider = "anthropic"\nbase_url = "{backup.base_url}"\n'
            'model = "claude-backup"\nretries = 0\n'
        )
        async with (
            served_from(tmp_path / "serve.toml", config) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            answer = await http.post(f"{url}/v1/chat/completions", json=ask("smart"))
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == "from the backup"
        assert len(down.requests) == 1
        assert backup.requests[0].json()["model"] == "claude-backup"


async def test_serve_route_pool_skips_a_failing_server_and_keeps_it_out(tmp_path: Path) -> None:
    """``base_url = [a, b]`` with ``pool = {...}``: a turn that fails on one server before
    its first item goes to the other, and during the cool-down no turn goes back to the
    failing one (its script holds one answer: a second request would fail the test)."""
    async with (
        open_scripted_server([ScriptedError(502, "bad gateway")], "chat") as bad,
        open_scripted_server(["one", "two"], "chat") as good,
    ):
        config = (
            f'[models."pooled"]\nprovider = "openai"\n'
            f'base_url = ["{bad.base_url}", "{good.base_url}"]\nretries = 0\n'
            "pool = { cool_down = 3600, failures = 1 }\n"
        )
        async with (
            served_from(tmp_path / "serve.toml", config) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            first = await http.post(f"{url}/v1/chat/completions", json=ask("pooled"))
            second = await http.post(f"{url}/v1/chat/completions", json=ask("pooled"))
        answers = [r.json()["choices"][0]["message"]["content"] for r in (first, second)]
        assert answers == ["one", "two"]
        assert len(bad.requests) == 1 and len(good.requests) == 2


async def test_serve_route_compaction_shortens_a_conversation_over_its_budget(
    tmp_path: Path,
) -> None:
    """``compaction = { budget = N }``: a conversation longer than N prompt tokens reaches
    the backend shortened (its oldest turns dropped) and is answered; a short one is
    sent whole."""
    long_turns = [f"turn {i}: " + "many words here " * 40 for i in range(8)] + ["last question"]
    async with open_scripted_server(
        [
            ScriptedTurn("short", usage=TokenUsage(5, 1)),
            ScriptedTurn("fits", usage=TokenUsage(5, 1)),
        ],
        "chat",
    ) as upstream:
        config = (
            f'[models."gpt-4o-mini"]\nprovider = "openai"\nbase_url = "{upstream.base_url}"\n'
            "compaction = { budget = 400 }\n"
        )
        async with (
            served_from(tmp_path / "serve.toml", config) as url,
            httpx.AsyncClient(timeout=WAIT) as http,
        ):
            short = await http.post(f"{url}/v1/chat/completions", json=ask("gpt-4o-mini"))
            long = await http.post(
                f"{url}/v1/chat/completions", json=ask("gpt-4o-mini", *long_turns)
            )
        assert short.json()["choices"][0]["message"]["content"] == "short"
        assert long.json()["choices"][0]["message"]["content"] == "fits"
        assert len(upstream.requests[0].json()["messages"]) == 1
        sent = upstream.requests[1].json()["messages"]
        assert 1 <= len(sent) < len(long_turns)
        assert sent[-1]["content"] == "last question"  # the newest turn is kept


async def test_serve_route_features_are_built_as_in_code(tmp_path: Path) -> None:
    """The file builds what code would: a FallbackClient whose token count is the first
    route's, a Compactor among its plugins (the pool is the test above's)."""
    config = tmp_path / "serve.toml"
    config.write_text(
        '[models."a"]\nprovider = "openai"\nbase_url = ["http://127.0.0.1:9/v1", '
        '"http://127.0.0.1:10/v1"]\npool = { cool_down = 5 }\n'
        'compaction = { budget = 0.5, headroom = 0.25 }\nfallback = ["b"]\n\n'
        '[models."b"]\nprovider = "anthropic"\nbase_url = "http://127.0.0.1:11"\n'
    )
    spec = load_spec(config, ENV)
    async with open_backends(spec) as backends:
        routed = backends["a"]
        assert isinstance(routed.client, FallbackClient)
        own, (other, model) = routed.client.clients[0][0], routed.client.clients[1]
        assert routed.counter is own and other is backends["b"].client and model == "b"
        compactor = next(p for p in own.plugins if isinstance(p, Compactor))
        assert (compactor.budget, compactor.headroom) == (0.5, 0.25)


@pytest.mark.parametrize(
    ("route", "says"),
    [
        ('provider = "openai"\nfallback = ["nowhere"]', r"models\.a\.fallback: 'nowhere'"),
        ('provider = "openai"\nfallback = ["a"]', r"models\.a\.fallback: 'a'"),
        ('provider = "openai"\nfallback = "b"\nbase_url = 3', r"models\.a\.base_url"),
        ('provider = "openai"\npool = { cool_down = 5 }', r"models\.a\.pool needs base_url"),
        (
            'provider = "openai"\nbase_url = ["http://x/v1"]\npool = { wait = 5 }',
            r"models\.a\.pool: .*wait",
        ),
        ('provider = "openai"\ncompaction = { budget = 2.5 }', r"models\.a\.compaction"),
        ('provider = "openai"\ncompaction = 5', r"models\.a\.compaction must be a table"),
    ],
)
async def test_serve_route_features_refuse_a_wrong_setting_naming_it(
    tmp_path: Path, route: str, says: str
) -> None:
    config = tmp_path / "serve.toml"
    config.write_text(f'[models."a"]\n{route}\n\n[models."b"]\nprovider = "openai"\n')
    with pytest.raises(ConfigurationError, match=says):
        async with open_backends(load_spec(config, ENV)):
            pass
