"""``cuca serve`` as a user starts it: the URL on the first line (port 0: any free
port), an open host refused without a key, the gateway's upstream key never shown."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cuca.cli.config import CliError
from cuca.cli.options import build_parser
from cuca.cli.serve import resolve_serve
from cuca.errors import ConfigurationError
from cuca.types import ProviderEndpoint


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def test_serve_cli_refuses_an_open_host_without_a_key() -> None:
    args = _args("--provider", "openai", "--base-url", "http://10.0.0.1/v1", "--host", "0.0.0.0")
    with pytest.raises(CliError, match="reachable from other machines"):
        resolve_serve(args, {})
    keyed = resolve_serve(_args(*args_list(args), "--api-key", "k"), {})
    assert keyed.api_keys == ("k",)
    told = resolve_serve(_args(*args_list(args), "--no-api-key"), {})
    assert told.allow_open and told.host == "0.0.0.0"


def args_list(args: argparse.Namespace) -> list[str]:
    return ["--provider", args.provider, "--base-url", args.base_url, "--host", args.host]


def test_serve_cli_a_gateway_takes_the_vendors_variable_and_keys_from_the_environment() -> None:
    env = {"OPENAI_API_KEY": "sk-up", "CUCA_SERVE_API_KEYS": "a, b"}
    spec = resolve_serve(_args("--provider", "openai", "--api-key", "c"), env)
    (backend,) = spec.backends
    assert backend.provider == ProviderEndpoint.OPENAI and backend.name == "*"
    assert backend.api_key == "sk-up" and spec.secrets() == ("sk-up",)
    assert spec.api_keys == ("c", "a", "b")
    assert "sk-up" not in repr(spec)


def test_serve_cli_prints_the_url_first_and_serves() -> None:
    command = [sys.executable, "-m", "cuca", "serve", "--provider", "openai"]
    command += ["--base-url", "http://127.0.0.1:9/v1", "--port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().decode().strip()
            assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
            assert httpx.get(f"{url}/health").json() == {"status": "ok"}
            models = httpx.get(f"{url}/v1/models").json()
            assert models == {"object": "list", "data": []}  # a gateway passes any name on
        finally:
            process.terminate()
            process.wait()


def test_serve_cli_config_file_maps_names_to_backends(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text(
        '[server]\nport = 9000\n\n'
        '[models."smol"]\nprovider = "local"\npath = "m.gguf"\nparallel = 2\nfast = true\n\n'
        '[models."gpt"]\nprovider = "openai"\nmodel = "gpt-4o-mini"\ntimeout = 60\n'
        'api_key_env = "MY_KEY"\n'
    )
    spec = resolve_serve(_args("--config", str(config)), {"MY_KEY": "sk-mine"})
    smol, gpt = spec.backends
    assert (smol.name, smol.path, smol.parallel) == ("smol", tmp_path / "m.gguf", 2)
    assert smol.fast
    assert not gpt.fast
    assert (gpt.provider, gpt.model, gpt.timeout, gpt.api_key) == (
        ProviderEndpoint.OPENAI,
        "gpt-4o-mini",
        60.0,
        "sk-mine",
    )
    assert spec.port == 9000 and spec.host == "127.0.0.1"


def test_serve_cli_config_file_refuses_a_wrong_type(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('[models."x"]\nprovider = "openai"\nretries = "two"\n')
    with pytest.raises(ConfigurationError, match=r"models\.x\.retries must be int"):
        resolve_serve(_args("--config", str(config)), {})


def test_serve_cli_fast_loads_the_engine_for_throughput(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--fast`` is the engine's throughput setting (what bench_serve.py's second cuca
    row runs): flash attention on and reuse not bit-exact; without it the exact mode; and
    a gateway refuses it, as it refuses every model-file option."""
    from cuca.engine import LocalModel
    from cuca.serve import build

    loads: list[dict[str, object]] = []
    monkeypatch.setattr(LocalModel, "load", lambda path, **kw: loads.append(kw))
    for argv in (["m.gguf", "--fast"], ["m.gguf"]):
        (backend,) = resolve_serve(_args(*argv), {}).backends
        build._load(backend)
    fast, exact = loads
    assert (fast["exact_reuse"], fast["flash_attention"]) == (False, True)
    assert (exact["exact_reuse"], exact["flash_attention"]) == (True, False)
    with pytest.raises(CliError, match="options are for the local engine"):
        resolve_serve(_args("--provider", "openai", "--fast"), {})


def test_serve_cli_config_file_refuses_a_fast_that_is_not_a_boolean(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('[models."x"]\nprovider = "local"\nfast = "yes"\n')
    with pytest.raises(ConfigurationError, match=r"models\.x\.fast must be bool"):
        resolve_serve(_args("--config", str(config)), {})


@pytest.mark.parametrize("option", ["path = \"m.gguf\"", "ctx = 2048", "fast = true"])
def test_serve_cli_config_file_refuses_a_model_option_on_a_gateway(
    tmp_path: Path, option: str
) -> None:
    """A local engine's option on a gateway's route would be ignored: it is refused at
    start, naming the key, as the command line refuses ``--fast`` with ``--provider``."""
    config = tmp_path / "serve.toml"
    config.write_text(f'[models."gpt"]\nprovider = "openai"\n{option}\n')
    key = option.split(" ")[0]
    with pytest.raises(ConfigurationError, match=rf"models\.gpt\.{key} is for the local engine"):
        resolve_serve(_args("--config", str(config)), {})


async def test_serve_cli_config_file_gives_a_route_its_client_features(tmp_path: Path) -> None:
    from cuca.cache import ResponseCache
    from cuca.limits import Budget, RateLimiter
    from cuca.observers.session_log import SessionLog
    from cuca.serve.build import open_backends

    config = tmp_path / "serve.toml"
    config.write_text(
        '[models."gpt"]\nprovider = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'session_log = "turns.sqlite"\n'
        "rate_limit = { requests_per_minute = 60, max_concurrent = 2 }\n"
        "budget = { tokens = 1000 }\ncache = { ttl = 60 }\n"
    )
    spec = resolve_serve(_args("--config", str(config)), {})
    async with open_backends(spec) as backends:
        kinds = [type(p) for p in backends["gpt"].client.plugins]
    assert kinds == [RateLimiter, Budget, ResponseCache, SessionLog]
    assert (tmp_path / "turns.sqlite").exists()
    config.write_text('[models."gpt"]\nprovider = "openai"\nbudget = { dollars = 5 }\n')
    with pytest.raises(ConfigurationError, match=r"models\.gpt\.budget"):
        async with open_backends(resolve_serve(_args("--config", str(config)), {})):
            pass
