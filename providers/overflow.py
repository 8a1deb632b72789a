"""Each vendor's "the prompt does not fit" answer, recognised in a non-2xx body.

I/O-free: a function per error shape (in each wire's ``overflow`` module) takes the
status and body of a refused request and returns the window and the size asked for
(:class:`~cuca.providers.decoding.Overflow`, each ``None`` when the body does not
say), or ``None`` when the body is some other error. The adapters turn a match into
:class:`~cuca.errors.HttpContextOverflowError` at their error boundary
(:meth:`ProviderAdapter.status_error`). :func:`any_overflow` tries every wire's.
"""

from __future__ import annotations

from .anthropic.overflow import anthropic_overflow
from .chat.overflow import chat_overflow
from .decoding import Overflow
from .gemini.overflow import gemini_overflow

__all__ = ["Overflow", "any_overflow"]


def any_overflow(status: int, body: str) -> Overflow | None:
    """Any vendor's overflow: for an error read where the wire is not known (a 200 JSON
    body holding ``{"error": ...}``, which every wire decodes alike)."""
    return (
        chat_overflow(status, body)
        or anthropic_overflow(status, body)
        or gemini_overflow(status, body)
    )
