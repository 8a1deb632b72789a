"""The entry points: `check_adapter` for any test runner, `conformance_test` for pytest."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cuca.errors import ConfigurationError
from cuca.types import ProviderEndpoint, UnifiedRequest

from ._checks import CHECKS, Effort
from ._model import ConformanceError, Failure, Subject, Transcript


def check_adapter(
    endpoint: ProviderEndpoint,
    transcripts: Sequence[Transcript],
    *,
    path: str = "",
    api_key: str | None = None,
    provider_config: Any = None,
    request: UnifiedRequest | None = None,
    end_marker: bool = True,
    error_body: Callable[[int, str], bytes] | None = None,
    checks: Iterable[str] | None = None,
    max_examples: int = 10,
    max_offsets: int | None = 48,
) -> None:
    """Run the conformance checks on the adapter serving `endpoint`; raise one
    `ConformanceError` listing every failure (each with its check, transcript, case and a
    reproduction), or return None when the adapter passes them all.

    Every turn runs over real loopback HTTP against `cuca.testing`'s replay server, in its
    own `trio.run`: call this from a synchronous test. `checks` picks checks by name
    (default: all of `CHECKS`); `max_examples` is the number of Hypothesis examples of each
    search, `max_offsets` the number of byte offsets the truncation checks cut each
    transcript at (None: every offset). See the parameters of `Subject` for the others.
    """
    if not transcripts:
        raise ConfigurationError("check_adapter needs at least one good transcript")
    names = list(CHECKS) if checks is None else list(checks)
    unknown = [name for name in names if name not in CHECKS]
    if unknown:
        raise ConfigurationError(f"unknown checks {unknown} (checks: {', '.join(CHECKS)})")
    subject = Subject(
        endpoint,
        path=path,
        api_key=api_key,
        provider_config=provider_config,
        end_marker=end_marker,
        error_body=error_body,
        **_request(request),
    )
    budget = Effort(max_examples=max_examples, max_offsets=max_offsets)
    failures: list[Failure] = []
    for name in names:
        failures += CHECKS[name](subject, transcripts, budget)
    if failures:
        raise ConformanceError(subject, failures)


def _request(request: UnifiedRequest | None) -> dict[str, Any]:
    """``Subject``'s ``request`` keyword, when one was given (else its default)."""
    return {} if request is None else {"request": request}


def conformance_test(
    endpoint: ProviderEndpoint, transcripts: Sequence[Transcript], **options: Any
) -> Callable[[str], None]:
    """A pytest test function running `check_adapter` once per check (one test item each,
    named after the check); assign it to a ``test_...`` name in a test module::

        test_my_gateway = conformance_test(ProviderEndpoint.custom("gw"), TRANSCRIPTS)

    `options` are `check_adapter`'s keyword arguments.
    """
    import pytest

    def test_conformance(check: str) -> None:
        check_adapter(endpoint, transcripts, checks=[check], **options)

    marked: Callable[[str], None] = pytest.mark.parametrize("check", list(CHECKS))(test_conformance)
    return marked
