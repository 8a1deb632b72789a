"""The jinja2 environment chat templates run in.

A chat template comes from a GGUF file, so it is untrusted code. :class:`ChatSandbox`
renders it the way Hugging Face transformers does (``trim_blocks``, ``lstrip_blocks``,
loop controls, ``{% generation %}``, an HF-style ``tojson``, ``raise_exception`` and
``strftime_now``) while making sure that it can do nothing but build a string:

* Attribute access is limited to the plain data a template is given (strings, numbers,
  lists, tuples, dicts, namespaces, loops and macros), never resolves a name that starts
  with ``_``, and refuses dunder and interpreter-internal names (``func_globals``,
  ``gi_frame``...) outright. A blocked access raises at once instead of becoming
  undefined, so a probe cannot pass silently.
* ``cycler``, ``joiner`` and ``lipsum`` are gone; ``range`` is capped.
* Every loop iteration, call, filter and write spends one step of a budget; every value
  a template builds and the total it writes are capped in size, and the usual size
  amplifiers (``*``, ``**``, ``%``, format widths, ``replace``, ``join``, ``indent``,
  width arguments) are checked before they run; rendering has a deadline.

Lists and dicts stay mutable (``.append``, ``.update``...) because real templates
(Kimi K2) mutate their own lists. Every failure surfaces as
:class:`~cuca.errors.TemplateError`.
"""

from __future__ import annotations

import contextvars
import functools
import json
import re
import string
import time
import traceback
from collections.abc import Callable, ItemsView, Iterator, KeysView, Sized, ValuesView
from datetime import datetime
from typing import Any

import attrs
import jinja2
from jinja2 import meta, nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.runtime import Context, LoopContext, Macro, Undefined
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import Namespace, pass_context
from jinja2.visitor import NodeTransformer

from cuca.errors import TemplateError

__all__ = [
    "ChatSandbox",
    "GenerationFlag",
    "LimitExceeded",
    "Limits",
    "TemplateRaised",
    "to_template_error",
]


@attrs.frozen
class Limits:
    """How far one rendering may go before it is stopped.

    ``max_chars`` caps any single string or list a template builds, and four times it
    caps everything it writes; it grows to eight times the size of the conversation
    for long conversations. ``max_steps`` counts loop iterations, calls, filters and
    writes. ``max_range`` caps ``range()``; ``max_seconds`` is a wall-clock deadline.
    """

    max_steps: int = 2_000_000
    max_chars: int = 4_000_000
    max_range: int = 10_000
    max_seconds: float = 10.0
    max_json_indent: int = 16


class LimitExceeded(jinja2.exceptions.SecurityError):
    """A rendering went over one of its :class:`Limits`."""


class TemplateRaised(Exception):
    """The template called ``raise_exception(message)``."""


_MAX_INT_BITS = 1 << 16
_PERCENT_SPEC = re.compile(r"%[-#0 +_^]*(\d*(?:\.\d+)?)")
# Filters and methods whose integer arguments set the size of what they build.
_SIZED_FILTERS = frozenset({"center", "indent", "truncate", "wordwrap", "batch", "slice"})
_SIZED_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "to_bytes"})
# Names that lead from a function, generator, frame or traceback to the interpreter.
_INTERNAL_NAMES = frozenset(
    "func_globals func_code func_closure gi_frame gi_code gi_yieldfrom cr_frame cr_code "
    "cr_await ag_frame ag_code ag_await f_globals f_locals f_builtins f_back f_code "
    "tb_frame tb_next mro".split()
)
_ATTRIBUTE_TYPES = (str, int, float, list, tuple, dict, Namespace, LoopContext, Macro)


class _Budget:
    """What one rendering has left to spend."""

    def __init__(self, limits: Limits, input_chars: int) -> None:
        self.limits = limits
        self.chars = max(limits.max_chars, 8 * input_chars)
        self.steps_left = limits.max_steps
        self.output_left = 4 * self.chars
        self.deadline = time.monotonic() + limits.max_seconds

    def step(self) -> None:
        self.steps_left -= 1
        if self.steps_left < 0:
            raise LimitExceeded(f"rendering took more than {self.limits.max_steps} steps")
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"rendering took more than {self.limits.max_seconds} seconds")

    def emit(self, size: int) -> None:
        self.step()
        self.output_left -= size
        if self.output_left < 0:
            raise LimitExceeded(f"template wrote more than {4 * self.chars} characters")

    def want(self, size: int) -> None:
        """Refuse to build a value of ``size`` items."""
        if size > self.chars:
            raise LimitExceeded(f"template built a value of {size} items (limit {self.chars})")

    def check(self, value: Any) -> Any:
        """``value``, once its size is known to be within the limits."""
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            if value.bit_length() > _MAX_INT_BITS:
                raise LimitExceeded("template built an integer too large to print")
        elif isinstance(value, str | list | tuple | dict | set):
            self.want(len(value))
        return value

    def check_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Refuse an integer argument over the limit where it sets a size (a width, a
        count), before the call builds a value that large."""
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > self.chars:
                raise LimitExceeded(f"integer argument {value} is over the limit {self.chars}")

    def check_widths(self, specs: list[str]) -> None:
        """Refuse format specs whose width or precision is over the limit."""
        for digits in re.findall(r"\d+", "".join(specs)):
            if len(digits) > 9 or int(digits) > self.chars:
                raise LimitExceeded(f"format width {digits} is over the limit {self.chars}")

    def check_percent_format(self, fmt: str) -> None:
        """``%``-style (and ``strftime``) specs: ``%0999999999d``."""
        self.check_widths(_PERCENT_SPEC.findall(fmt))

    def check_brace_format(self, fmt: str) -> None:
        """``str.format`` specs: ``{:999999999}``; nested specs (``{:{w}}``) are refused."""
        specs = [spec or "" for _, _, spec, _ in string.Formatter().parse(fmt)]
        if any("{" in spec for spec in specs):
            raise jinja2.exceptions.SecurityError("nested format specs are not allowed")
        self.check_widths(specs)


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "cuca_template_budget", default=None
)


def _budget() -> _Budget:
    budget = _BUDGET.get()
    if budget is None:
        raise jinja2.exceptions.SecurityError(
            "templates render only through ChatSandbox.render_template"
        )
    return budget


# -- helpers real templates call -------------------------------------------------------


def _raise_exception(message: str) -> None:
    raise TemplateRaised(str(message))


def _json_default(value: Any) -> Any:
    """Let ``tojson`` take lazy sequences (``tools | map(attribute='function')``)."""
    if isinstance(value, Iterator | KeysView | ValuesView | ItemsView | range):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _safe(value: Any) -> str:
    """``safe`` as llama.cpp's renderer has it: the value as plain text. jinja2's marks
    it as Markup, and Markup escapes what is joined to it (functionary v3.1 writes
    ``"..."|safe + tool | tojson``, whose JSON came out as ``&#34;name&#34;``); nothing
    is escaped when no autoescaping is on, so the mark is all it would change."""
    return str(value)


def _make_tojson(limits: Limits) -> Callable[..., str]:
    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | str | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        """HF's ``tojson``: plain ``json.dumps``, no HTML escaping, keyword args kept."""
        width = len(indent) if isinstance(indent, str) else indent or 0
        if width > limits.max_json_indent:
            raise LimitExceeded(f"tojson indent {indent!r} is over {limits.max_json_indent}")
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
            default=_json_default,
        )

    return tojson


def _from_json(text: str) -> Any:
    """llama.cpp's ``from_json`` filter (its DeepSeek V3.2/V4 templates call it)."""
    return json.loads(text)


# -- size pre-checks for the usual amplifiers ------------------------------------------


def _replaced_size(text: str, old: str, new: str) -> int:
    if not old:
        return len(text) + (len(text) + 1) * len(new)
    return len(text) + text.count(old) * max(0, len(new) - len(old))


def _joined(budget: _Budget, separator: str, items: Any) -> list[Any]:
    materialised = list(items)
    size = len(separator) * max(0, len(materialised) - 1)
    for item in materialised:
        size += len(item) if isinstance(item, str) else len(str(item))
        budget.want(size)
    return materialised


def _precheck_filter(
    name: str, budget: _Budget, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """Check a built-in filter's arguments before it runs; may return new args."""
    if name == "replace" and len(args) >= 4 and all(isinstance(a, str) for a in args[1:4]):
        budget.want(_replaced_size(str(args[1]), args[2], args[3]))
    elif name == "join" and len(args) >= 2 and "attribute" not in kwargs:
        separator = args[2] if len(args) > 2 else kwargs.get("d", "")
        if isinstance(separator, str):
            return (args[0], _joined(budget, separator, args[1]), *args[2:])
    elif name == "indent" and args and isinstance(args[0], str):
        width = args[1] if len(args) > 1 else kwargs.get("width", 4)
        step = len(width) if isinstance(width, str) else int(width)
        budget.want(len(args[0]) + (args[0].count("\n") + 1) * step)
    elif name == "format" and args and isinstance(args[0], str):
        budget.check_percent_format(args[0])
        if "*" in args[0]:
            budget.check_arguments(args[1:], kwargs)
    return args


def _precheck_method(budget: _Budget, method: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Check a string method's arguments before it runs; may return new args."""
    owner = getattr(method, "__self__", None)
    name = getattr(method, "__name__", "")
    if not isinstance(owner, str):
        return args
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str):
        budget.want(_replaced_size(owner, args[0], str(args[1])))
    elif name == "join" and args:
        return (_joined(budget, owner, args[0]), *args[1:])
    elif name == "expandtabs" and args and isinstance(args[0], int):
        budget.want(len(owner) + owner.count("\t") * args[0])
    return args


def _check_binop(budget: _Budget, operator: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be over the limits, before computing it."""
    ints = isinstance(left, int) and isinstance(right, int)
    if operator == "**" and ints and right > 0:
        if right * max(1, left.bit_length()) > _MAX_INT_BITS:
            raise LimitExceeded(f"{left} ** {right} is too large")
    elif operator == "*":
        if ints and left.bit_length() + right.bit_length() > _MAX_INT_BITS:
            raise LimitExceeded("integer product is too large")
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, Sized) and isinstance(count, int) and not isinstance(seq, dict):
                budget.want(len(seq) * max(0, count))
    elif operator == "+" and isinstance(left, Sized) and isinstance(right, Sized):
        budget.want(len(left) + len(right))
    elif operator == "%" and isinstance(left, str):
        budget.check_percent_format(left)
        if "*" in left:  # the width comes from the arguments: '%*d' % (width, n)
            budget.check_arguments(right if isinstance(right, tuple) else (right,), {})


# -- metering: hooks the compiled template calls ---------------------------------------


class _Metered:
    """An iterable that spends one step per item (wraps every ``for`` loop)."""

    def __init__(self, iterable: Any) -> None:
        self.iterable = iterable

    def __len__(self) -> int:
        return len(self.iterable)

    def __iter__(self) -> Iterator[Any]:
        budget = _budget()
        for item in self.iterable:
            budget.step()
            yield item


@pass_context
def _meter_loop(context: Context, iterable: Any) -> Any:
    if isinstance(iterable, Undefined):
        return iterable
    return _Metered(iterable)


@pass_context
def _meter_output(context: Context, value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    _budget().emit(len(text))
    return text


@pass_context
def _meter_value(context: Context, value: Any) -> Any:
    return _budget().check(value)


_HOOKS: dict[str, Callable[..., Any]] = {
    "cuca_loop": _meter_loop,
    "cuca_emit": _meter_output,
    "cuca_checked": _meter_value,
}


def _hook(node: nodes.Expr, name: str) -> nodes.Expr:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


def _expression(node: nodes.Node) -> nodes.Expr:
    """An output item as an expression (literal template text becomes a constant)."""
    if isinstance(node, nodes.TemplateData):
        return nodes.Const(node.data, lineno=node.lineno)
    assert isinstance(node, nodes.Expr)
    return node


class _Meter(NodeTransformer):
    """Rewrites a parsed template so that loops, writes and ``~`` go through the hooks.

    The hooks take the context, so jinja's optimizer cannot fold them away at compile
    time.
    """

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _hook(_expression(node.iter), "cuca_loop")
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)
        node.nodes = [_hook(_expression(child), "cuca_emit") for child in node.nodes]
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _hook(node, "cuca_checked")


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    # arguments after the filtered value (and after the context jinja may pass first)
    skip = 2 if getattr(func, "jinja_pass_arg", None) is not None else 1
    sized = name in _SIZED_FILTERS

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        if sized:
            budget.check_arguments(args[skip:], kwargs)
        args = _precheck_filter(name, budget, args, kwargs)
        return budget.check(func(*args, **kwargs))

    return guarded


class _GenerationTag(Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body, as in HF."""

    tags = {"generation"}  # noqa: RUF012 - jinja's Extension declares it this way

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


# -- the environment -------------------------------------------------------------------


class _Undefined(Undefined):
    """An undefined value as llama.cpp's renderer treats it beside a string: the empty
    string (Command R+ writes ``'): ' + param_fields.description`` for a parameter
    without a description). Every other use still fails, as in jinja2."""

    def __add__(self, other: Any) -> Any:
        return other if isinstance(other, str) else super().__add__(other)

    def __radd__(self, other: Any) -> Any:
        return other if isinstance(other, str) else super().__radd__(other)


class ChatSandbox(SandboxedEnvironment):
    """A jinja2 sandbox configured like HF's chat-template environment, but bounded."""

    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(
        self, limits: Limits | None = None, clock: Callable[[], datetime] | None = None
    ) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[jinja2.ext.loopcontrols, _GenerationTag],
            undefined=_Undefined,
        )
        self.limits = limits or Limits()
        self.clock = clock or datetime.now
        for name in ("cycler", "joiner", "lipsum"):
            self.globals.pop(name, None)
        self.globals.update(
            range=self._range, raise_exception=_raise_exception, strftime_now=self._strftime_now
        )
        self.filters.update(tojson=_make_tojson(self.limits), from_json=_from_json, safe=_safe)
        for name, func in list(self.filters.items()):
            self.filters[name] = _guard_filter(name, func)
        self.filters.update(_HOOKS)

    def _range(self, *args: int) -> range:
        numbers = range(*args)
        if len(numbers) > self.limits.max_range:
            raise LimitExceeded(f"range of {len(numbers)} items (limit {self.limits.max_range})")
        return numbers

    def _strftime_now(self, fmt: str) -> str:
        _budget().check_percent_format(fmt)
        return self.clock().strftime(fmt)

    # -- what a template may reach ---------------------------------------------------

    def getattr(self, obj: Any, attribute: str) -> Any:
        """``obj.attribute``; dunder and interpreter-internal names are refused even when
        missing, so that probing for them fails loudly instead of printing nothing."""
        if attribute.startswith("__") or attribute in _INTERNAL_NAMES:
            self.unsafe_undefined(obj, attribute)
        return super().getattr(obj, attribute)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return isinstance(obj, _ATTRIBUTE_TYPES) and super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        """Raise at once: an undefined would print as an empty string and hide the probe."""
        raise jinja2.exceptions.SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is not None:
            _budget().check_brace_format(value.__self__)
        return wrapper

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        if getattr(obj, "__name__", "") in _SIZED_METHODS:
            budget.check_arguments(args, kwargs)
        args = _precheck_method(budget, obj, args)
        result = budget.check(super().call(context, obj, *args, **kwargs))
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, list | dict | set):
            budget.check(owner)
        return result

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        _check_binop(budget, operator, left, right)
        return budget.check(super().call_binop(context, operator, left, right))

    # -- compiling and rendering -----------------------------------------------------

    def compile_template(self, source: str) -> tuple[jinja2.Template, frozenset[str]]:
        """The metered template compiled from ``source``, and the names it reads from
        its context (``jinja2.meta.find_undeclared_variables``)."""
        try:
            tree = _Meter().visit(self.parse(source))
            reads = frozenset(meta.find_undeclared_variables(tree))
            return self.from_string(tree), reads
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"line {exc.lineno}: {exc.message}") from exc
        except Exception as exc:
            raise to_template_error(exc) from exc

    def render_template(
        self, template: jinja2.Template, variables: dict[str, Any], *, input_chars: int = 0
    ) -> str:
        """Render ``template`` under a fresh budget; every failure is a TemplateError."""
        token = _BUDGET.set(_Budget(self.limits, input_chars))
        try:
            return template.render(variables)
        except Exception as exc:
            raise to_template_error(exc) from exc
        finally:
            _BUDGET.reset(token)

    def render_with_generation_prompt(
        self, template: jinja2.Template, variables: dict[str, Any], *, input_chars: int = 0
    ) -> tuple[str, int]:
        """Render ``template`` with a :class:`GenerationFlag` as ``add_generation_prompt``;
        the text, and where its generation prompt starts (its length if the template
        never tested the flag). Every failure is a TemplateError."""
        parts: list[str] = []
        written = 0

        def tell() -> int:
            return written

        flag = GenerationFlag(tell)
        token = _BUDGET.set(_Budget(self.limits, input_chars))
        try:
            for part in template.generate({**variables, "add_generation_prompt": flag}):
                parts.append(part)
                written += len(part)
        except Exception as exc:
            raise to_template_error(exc) from exc
        finally:
            _BUDGET.reset(token)
        return "".join(parts), written if flag.position is None else flag.position


class GenerationFlag:
    """A true ``add_generation_prompt`` that notes where the output stood when the
    template last tested it.

    The generation prompt is what a template writes after testing the flag, so one
    rendering gives both the prompt and where its generation prompt starts (instead
    of rendering twice, with and without it, and comparing). To the template it is
    ``true``: truthy, equal to ``true``, printed as ``True``.
    """

    def __init__(self, tell: Callable[[], int]) -> None:
        self._tell = tell
        self.position: int | None = None  # characters written before the last test

    def __bool__(self) -> bool:
        self.position = self._tell()
        return True

    def __eq__(self, other: object) -> bool:
        return other is True or other is self

    def __hash__(self) -> int:
        return hash(True)

    def __str__(self) -> str:
        return "True"


def _template_line(exc: BaseException) -> int | None:
    frames = traceback.extract_tb(exc.__traceback__)
    lines = [frame.lineno for frame in frames if frame.filename == "<template>"]
    return lines[-1] if lines else None


def to_template_error(exc: Exception) -> TemplateError:
    """The TemplateError a failed compilation or rendering reports."""
    if isinstance(exc, TemplateError):
        return exc
    if isinstance(exc, TemplateRaised):
        return TemplateError(str(exc))
    line = _template_line(exc)
    where = f"line {line}: " if line is not None else ""
    if isinstance(exc, LimitExceeded):
        return TemplateError(f"{where}limit exceeded: {exc}")
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return TemplateError(f"{where}blocked by the sandbox: {exc}")
    if isinstance(exc, jinja2.TemplateError):
        return TemplateError(f"{where}{exc.message or type(exc).__name__}")
    return TemplateError(f"{where}{type(exc).__name__}: {exc}")
