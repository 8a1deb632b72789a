"""``cuca serve``: resolve what to serve, refuse an open server without keys, load the
models, bind, print the URL on the first line, and serve until interrupted."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping
from pathlib import Path

import trio

from cuca.errors import ConfigurationError
from cuca.providers.table import env_key
from cuca.serve.config import DEFAULT_PORT, BackendSpec, ServeSpec, load_spec
from cuca.types import ProviderEndpoint

from .config import EXIT_OK, CliError
from .console import Console

__all__ = ["KEYS_ENV", "resolve_serve", "run_serve"]

KEYS_ENV = "CUCA_SERVE_API_KEYS"
"""The server's keys, comma-separated, besides each ``--api-key``."""


def _backend(args: argparse.Namespace, env: Mapping[str, str]) -> BackendSpec:
    provider = ProviderEndpoint.parse(args.provider or "local")
    template = Path(args.chat_template_file).expanduser() if args.chat_template_file else None
    if provider == ProviderEndpoint.LOCAL:
        if args.base_url:
            raise CliError("--base-url is for a gateway (--provider NAME)")
        from cuca.engine import default_model_path

        path = Path(args.path).expanduser() if args.path else default_model_path()
        name = args.model or path.name.removesuffix(".gguf")
        return BackendSpec(
            name,
            provider,
            path=path,
            ctx=args.ctx,
            threads=args.threads,
            parallel=args.parallel,
            fast=bool(args.fast),
            chat_template_file=template,
        )
    if args.path or template or args.ctx or args.parallel or args.fast:
        raise CliError("a model file and its options are for the local engine")
    return BackendSpec(
        args.model or "*",
        provider,
        base_url=args.base_url,
        api_key=env_key(provider.kind, env),
        timeout=args.timeout,
        retries=args.retries,
        threads=args.threads,
    )


def resolve_serve(args: argparse.Namespace, env: Mapping[str, str]) -> ServeSpec:
    """What ``cuca serve`` serves, from its flags, ``--config`` file and environment."""
    if args.config:
        if args.path or args.provider:
            raise CliError("--config names the models: no MODEL or --provider beside it")
        spec = load_spec(Path(args.config).expanduser(), env)
        backends = spec.backends
        host = args.host or spec.host
        port = spec.port if args.port is None else args.port
        gates = spec.keys
    else:
        backends = (_backend(args, env),)
        host = args.host or "127.0.0.1"
        port = DEFAULT_PORT if args.port is None else args.port
        gates = {}
    keys = [*args.api_key, *(k.strip() for k in env.get(KEYS_ENV, "").split(",") if k.strip())]
    spec = ServeSpec(backends, host, port, tuple(keys), bool(args.allow_no_key), gates)
    _check_open(spec)
    return spec


def _check_open(spec: ServeSpec) -> None:
    from cuca.serve.run import is_loopback

    if not spec.api_keys and not is_loopback(spec.host) and not spec.allow_open:
        raise CliError(
            f"--host {spec.host} is reachable from other machines: give it a key "
            f"(--api-key KEY or {KEYS_ENV}), or pass --no-api-key to serve it open"
        )


async def serve_spec(spec: ServeSpec, console: Console) -> None:
    """Load the backends, bind, print the URL, serve until cancelled."""
    from cuca.serve.app import ServeApp
    from cuca.serve.build import key_limits, open_backends
    from cuca.serve.run import serve

    limits = key_limits(spec)
    async with open_backends(spec) as backends:
        app = ServeApp(backends, api_keys=spec.api_keys, secrets=spec.secrets(), key_limits=limits)
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve, app, spec.host, spec.port)
            console.out.write(url + "\n")
            console.out.flush()
            names = ", ".join(sorted(backends))
            console.status(f"cuca serve: {names} on {url} (Ctrl-C to stop)")


def run_serve(args: argparse.Namespace, env: Mapping[str, str], console: Console) -> int:
    """``cuca serve``, from parsed flags to exit status."""
    try:
        spec = resolve_serve(args, env)
    except ConfigurationError as error:
        raise CliError(str(error).removeprefix("configuration error: ")) from None
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    trio.run(serve_spec, spec, console)
    return EXIT_OK
