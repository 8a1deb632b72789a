"""cuca.serve: every backend behind the OpenAI chat and Responses wires and the Anthropic
Messages wire, as an ASGI application (``cuca serve`` runs it under trio; see
docs/serve.md).

:class:`ServeApp` is the application, :class:`Backend` what serves one model name,
:class:`KeyLimits` each client key's own rate limit and budget, :func:`serve` runs an
application on a host and port under trio.
"""

import typing as _typing

from cuca._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from .app import Backend as Backend
    from .app import Limits as Limits
    from .app import ServeApp as ServeApp
    from .keys import KeyLimits as KeyLimits
    from .run import serve as serve
    from .signing import ServerSignatures as ServerSignatures

_LAZY: dict[str, str] = {
    "Backend": "cuca.serve.app",
    "KeyLimits": "cuca.serve.keys",
    "Limits": "cuca.serve.app",
    "ServeApp": "cuca.serve.app",
    "ServerSignatures": "cuca.serve.signing",
    "serve": "cuca.serve.run",
}
"""Names resolved on first use: name -> the module that defines it."""

__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())
