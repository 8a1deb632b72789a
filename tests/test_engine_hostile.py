"""Hostile chat templates: a GGUF template is untrusted code.

Every escape attempt and every runaway template must end in a TemplateError, and no
payload may run a command: the ones that try write a marker file that must not appear.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cuca.engine.sandbox import Limits
from cuca.engine.template import ChatTemplate
from cuca.errors import TemplateError
from cuca.types import UnifiedRequest

REQUEST = UnifiedRequest.new("m").add_system_message("Be brief.").add_user_message("Hi")


def render(source: str, limits: Limits | None = None) -> str:
    return ChatTemplate(source, limits=limits).render(REQUEST)


BLOCKED = "blocked by the sandbox: access to attribute '[^']+' of '[^']+' object is unsafe"
"""What a refused attribute walk says: the failure is the sandbox's, not another one."""


def refused(source: str, match: str, limits: Limits | None = None) -> TemplateError:
    """Render `source`: it must fail with a TemplateError saying `match` (a regex)."""
    with pytest.raises(TemplateError, match=match) as info:
        render(source, limits)
    assert str(info.value).startswith("template error: ")
    return info.value


# -- escapes ---------------------------------------------------------------------------

ATTRIBUTE_WALKS = [
    "{{ ().__class__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ [].__class__.__base__.__subclasses__() }}",
    "{{ messages.__class__.__init__.__globals__ }}",
    "{{ messages[0].__class__ }}",
    "{{ messages[0]['__class__'] }}",
    "{{ raise_exception.__globals__['__builtins__'] }}",
    "{{ raise_exception.func_globals }}",
    "{{ raise_exception.__code__ }}",
    "{{ strftime_now.__self__ }}",
    "{{ strftime_now.__func__.__globals__ }}",
    "{{ range.__self__.globals }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ namespace(a=1)._Namespace__attrs }}",
    "{{ namespace(a=1).__dict__ }}",
    "{% for x in messages %}{{ loop._iterator }}{% endfor %}",
    "{% for x in messages %}{{ loop.__class__.__init__.__globals__ }}{% endfor %}",
    "{{ self.__init__.__globals__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ (messages | map(attribute='role')).gi_frame }}",
    "{{ (messages | map(attribute='role')).gi_frame.f_globals }}",
    "{{ (messages | map(attribute='role')).gi_code }}",
    "{{ dict.__base__.__subclasses__() }}",
    "{{ dict.mro() }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ lipsum.__globals__['os'] }}",
    "{{ messages | attr('__class__') }}",
    "{{ messages | map(attribute='__class__') | list }}",
    "{{ messages | selectattr('__class__') | list }}",
    "{{ messages | sort(attribute='__class__.__name__') }}",
    "{% macro m() %}{% endmacro %}{{ m.__globals__ }}",
]


@pytest.mark.parametrize("source", ATTRIBUTE_WALKS)
def test_hostile_attribute_walks_are_refused(source: str) -> None:
    refused(source, BLOCKED)


FORMAT_ATTACKS = [
    "{{ '{0.__class__.__mro__}'.format(messages) }}",
    "{{ '{0.__globals__}'.format(raise_exception) }}",
    "{{ '{x.__class__}'.format_map({'x': 1}) }}",
    "{{ ('{0.__class__}' | attr('format'))(1) }}",
    "{{ ('{x.__class__}' | attr('format_map'))({'x': 1}) }}",
    "{{ '{0[__class__]}'.format(messages[0]) }}",
]


@pytest.mark.parametrize("source", FORMAT_ATTACKS)
def test_hostile_format_string_attacks_are_refused(source: str) -> None:
    refused(source, BLOCKED)


@pytest.mark.parametrize(
    "source,reason",
    [
        ("{{ cycler(1, 2).next() }}", "'cycler' is undefined"),
        ("{{ joiner(',')() }}", "'joiner' is undefined"),
        ("{{ lipsum(5) }}", "'lipsum' is undefined"),
        ("{% include 'x.jinja' %}", "no loader"),
        ("{% import 'os' as os %}{{ os }}", "no loader"),
        ("{% from 'os' import system %}{{ system }}", "no loader"),
        ("{% extends '/etc/passwd' %}", "no loader"),
    ],
)
def test_hostile_removed_globals_and_loaders_are_refused(source: str, reason: str) -> None:
    refused(source, reason)


def test_hostile_removed_globals_print_as_undefined() -> None:
    # A bare undefined name prints empty, as in HF: nothing is reachable through it.
    assert render("[{{ cycler }}{{ joiner }}{{ lipsum }}]") == "[]"


def test_hostile_llama_cpp_python_advisory_payload(tmp_path: Path) -> None:
    # GHSA-56xg-wfcc-g829: a GGUF chat template that walks to os.popen.
    marker = tmp_path / "cuca-pwned"
    source = (
        "{% for x in ().__class__.__base__.__subclasses__() %}"
        '{% if "warning" in x.__name__ %}'
        "{{ x()._module.__builtins__['__import__']('os').popen(\"touch " + str(marker) + '") }}'
        "{% endif %}{% endfor %}"
    )
    refused(source, "unsafe")
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload",
    [
        "{{ self.__init__.__globals__.__builtins__.__import__('os').system('touch MARK') }}",
        "{{ cycler.__init__.__globals__.os.popen('touch MARK').read() }}",
        "{{ lipsum.__globals__['os'].popen('touch MARK') }}",
        "{{ namespace.__init__.__globals__['os'].system('touch MARK') }}",
        "{{ raise_exception.__globals__['__builtins__']['exec']"
        "('import os; os.system(\"touch MARK\")') }}",
        "{{ ''.__class__.__mro__[1].__subclasses__()[0]"
        ".__init__.__globals__['sys'].modules['os'].system('touch MARK') }}",
        "{{ '{0.__init__.__globals__[os].system}'.format(cycler) }}",
        "{% for c in [].__class__.__base__.__subclasses__() %}"
        "{% if c.__name__ == 'Popen' %}{{ c(['touch', 'MARK']) }}{% endif %}{% endfor %}",
    ],
)
def test_hostile_command_payloads_run_nothing(tmp_path: Path, payload: str) -> None:
    marker = tmp_path / "pwned"
    refused(payload.replace("MARK", str(marker)), BLOCKED)
    assert not marker.exists()


def test_hostile_data_keys_with_underscores_are_plain_data() -> None:
    # Item access on the template's own dicts is data, not an attribute walk.
    assert render("{{ {'__class__': 'just a key'}['__class__'] }}") == "just a key"


def test_hostile_templates_mutate_only_their_own_data() -> None:
    # (It prints the system text, so it has a system role: nothing is folded.)
    source = (
        "{% set _ = messages.append({'role': 'x'}) %}{{ messages | length }} "
        "{{ messages[0].content }}"
    )
    template = ChatTemplate(source)
    assert template.render(REQUEST) == "3 Be brief."
    assert template.render(REQUEST) == "3 Be brief."
    assert len(REQUEST.messages) == 2


# -- runaway templates -----------------------------------------------------------------


def test_hostile_range_is_capped() -> None:
    refused("{{ range(100000) | length }}", "range of 100000 items")
    refused("{% for i in range(10 ** 9) %}{% endfor %}", "limit exceeded")


def test_hostile_endless_loop_is_stopped_by_the_step_budget() -> None:
    # The loop appends to the list it walks: it would never end.
    source = "{% set l = [1] %}{% for x in l %}{% set _ = l.append(x) %}{% endfor %}"
    refused(source, "more than 10000 steps", Limits(max_steps=10_000))


def test_hostile_endless_loop_is_stopped_with_default_limits() -> None:
    # 10**12 iterations: only the budget (or the deadline) ends it.
    source = (
        "{% for i in range(10000) %}{% for j in range(10000) %}{% for k in range(10000) %}"
        "{% endfor %}{% endfor %}{% endfor %}"
    )
    started = time.monotonic()
    refused(source, "limit exceeded")
    # the wall-clock deadline (Limits.max_seconds, 10 s) ends it however busy the
    # machine is: 60 s only catches a rendering that nothing stops
    assert time.monotonic() - started < 60


def test_hostile_nested_ranges_are_stopped() -> None:
    source = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}"
    refused(source, "steps", Limits(max_steps=50_000))


def test_hostile_recursion_is_stopped() -> None:
    refused("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "Recursion")


def test_hostile_deadline_stops_rendering() -> None:
    source = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}"
    refused(source, "seconds", Limits(max_steps=10**12, max_seconds=0.05))


HUGE_VALUES = [
    "{{ 'x' * 10 ** 9 }}",
    "{{ ['x'] * 10 ** 9 }}",
    "{{ 2 ** (10**9) }}",
    "{{ 2 ** 100000 }}",
    "{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}",
    "{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}",
    "{% set ns = namespace(n=3) %}{% for i in range(64) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
    "{% set l = [0] %}{% for i in range(64) %}{% set _ = l.extend(l) %}{% endfor %}",
    "{{ 'a'.center(10 ** 9) }}",
    "{{ 'a'.ljust(10 ** 9) }}",
    "{{ '%0999999999d' % 1 }}",
    "{{ '%0999999999d' | format(1) }}",
    "{{ '%*d' % (999999999, 1) }}",
    "{{ '{:999999999}'.format(1) }}",
    "{{ '{:{w}}'.format(1, w=999999999) }}",
    "{{ '{:{w}}'.format(1, w='999999999') }}",
    "{{ strftime_now('%0999999999Y') }}",
    "{% set s = 'x' * 1000000 %}{{ s.replace('x', s) }}",
    "{% set s = 'x' * 1000000 %}{{ s | replace('x', s) }}",
    "{% set s = 'x' * 1000000 %}{{ ([s] * 100) | join }}",
    "{% set s = 'x' * 1000000 %}{{ ''.join([s] * 100) }}",
    "{{ ('x\\n' * 1000000) | indent(100) }}",
    "{{ ('\\t' * 1000).expandtabs(100000) }}",
    "{{ [1] | tojson(indent=1000) }}",
]


@pytest.mark.parametrize("source", HUGE_VALUES)
def test_hostile_huge_values_are_refused(source: str) -> None:
    refused(source, "limit exceeded: |blocked by the sandbox: nested format specs")


def test_hostile_big_numbers_and_digits_still_print() -> None:
    # Only sizes are capped: large numbers and long digit runs in text are plain data.
    source = (
        "{{ 10 ** 12 }} {{ 1700000000123 | string }} {{ '{} 12345678901'.format(10 ** 12) }} "
        "{{ '%d 99999999999%%' % 10 ** 12 }} {{ '{:>8}'.format('a') }}"
    )
    expected = "1000000000000 1700000000123 1000000000000 12345678901 1000000000000 99999999999% "
    assert render(source) == expected + "       a"


def test_hostile_output_is_capped() -> None:
    source = "{% for i in range(100) %}{{ 'x' * 100 }}{% endfor %}"
    refused(source, "wrote more than", Limits(max_chars=1000))
    source = "{% for i in range(1000) %}" + "x" * 50 + "{% endfor %}"
    refused(source, "wrote more than", Limits(max_chars=1000))


def test_hostile_captured_output_counts_too() -> None:
    source = "{% set s %}{% for i in range(100) %}{{ 'x' * 100 }}{% endfor %}{% endset %}"
    refused(source, "wrote more than", Limits(max_chars=1000))


def test_hostile_limits_grow_with_the_conversation() -> None:
    # A long conversation is no reason to refuse: the caps scale with the input.
    big = "y" * 3_000_000
    request = UnifiedRequest.new("m").add_user_message(big)
    source = "{% for m in messages %}{{ m.content | trim }}{{ m.content.strip() }}{% endfor %}"
    assert ChatTemplate(source, limits=Limits(max_chars=1000)).render(request) == big * 2


def test_hostile_errors_render_cleanly_afterwards() -> None:
    # A refused rendering leaves the template usable.
    users = "messages | selectattr('role', 'equalto', 'user') | list | length"
    template = ChatTemplate("{% if " + users + " > 1 %}{{ 'x' * 10 ** 9 }}{% endif %}ok")
    with pytest.raises(TemplateError):
        template.render(REQUEST.add_user_message("again"))
    assert template.render(REQUEST) == "ok"
