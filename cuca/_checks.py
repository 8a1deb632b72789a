"""Small attrs validators that refuse a wrong value with a :class:`ConfigurationError`.

A value the user gives is checked where it is given (at construction), so a mistake
surfaces as one line naming the field and what it takes, never as a ``TypeError`` deep
inside an encoder or a request the server refuses.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from .errors import ConfigurationError

__all__ = ["int_in", "kind", "of_type", "optional", "positive_int", "real_in", "seconds"]


def kind(value: object) -> str:
    """``value`` as an error message shows it: its repr (shortened) and its type."""
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _name(instance: object, attribute: attrs.Attribute[Any]) -> str:
    return f"{type(instance).__name__}.{attribute.name}"


def of_type(*types: type, what: str) -> Any:
    """The value is an instance of one of ``types`` (``what`` says it in words)."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        # bool is an int to isinstance, never to a user: True is not a max_tokens
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ConfigurationError(
                f"{_name(instance, attribute)} must be {what}, not {kind(value)}"
            )

    return check


def optional(check: Any) -> Any:
    """``check``, except that ``None`` passes."""

    def maybe(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None:
            check(instance, attribute, value)

    return maybe


def positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An ``int`` of at least 1 (not a ``bool``, not a string of digits)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{_name(instance, attribute)} must be a positive integer, not {kind(value)}"
        )


def int_in(low: int, high: int) -> Any:
    """An ``int`` within ``[low, high]`` (not a ``bool``, not a float)."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigurationError(
                f"{_name(instance, attribute)} must be an integer from {low} to {high}, "
                f"not {kind(value)}"
            )

    return check


def real_in(low: float, high: float) -> Any:
    """A finite ``int`` or ``float`` within ``[low, high]``."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not low <= value <= high
        ):
            raise ConfigurationError(
                f"{_name(instance, attribute)} must be a number from {low:g} to {high:g}, "
                f"not {kind(value)}"
            )

    return check


def seconds(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A duration: a finite number of seconds above zero."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(
            f"{_name(instance, attribute)} must be a number of seconds above 0, not {kind(value)}"
        )
