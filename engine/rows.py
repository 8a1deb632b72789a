"""How each prompt token is evaluated, so that a warm turn gives the bits of a cold one.

llama.cpp's CPU kernels round a token differently depending on how many rows of its
sequence its step holds: alone (one row: generation) through one kernel, with others
through another, and on some weight types (Gemma 3's Q5_0 and Q8_0) a step of two to
seven rows differently again. From :data:`TOGETHER_ROWS` rows on, a row's bits do not
depend on its step (measured on both test models: any split of a prompt into steps of
eight rows or more, short ones padded, gives the same logits and the same cache). So
the exact mode gives every prompt token a *way*, a pure function of the prompt
(:func:`canonical`), and evaluates it that way:

* the tokens the model wrote itself in earlier turns (an assistant message's text,
  which generation evaluated one at a time), alone;
* every other token, the last one included, with its neighbours, in steps of at least
  :data:`TOGETHER_ROWS` rows of its sequence: a shorter chunk (a short message between
  two answers, the last prompt token when the same prompt comes again) is padded with
  placeholder rows after it, whose K/V is dropped right after the step.

A sequence of the cache remembers how each of its tokens was evaluated: it holds
*keys* (:func:`key`), a token id and its way. A new prompt reuses the longest common
prefix of keys, so a cached token is reused only if a cold prefill of the new prompt
would evaluate it the same way; its generated tokens (evaluated alone) are reused when
the new prompt carries them back as the assistant's text.

Pure: no llama.cpp here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "TOGETHER_ROWS",
    "alone",
    "canonical",
    "find_spans",
    "key",
    "kinds_from_spans",
    "message_spans",
    "token_of",
]

TOGETHER_ROWS = 8
"""The fewest rows of one sequence a step evaluating tokens with their neighbours holds
(padded with placeholder rows when the chunk is shorter). Measured: on Gemma 3 270M a
step of 2 to 7 rows of a sequence rounds unlike one of 8 or more (a warm turn whose new
message was 6 tokens gave other logits than cold); from 8 rows on every split tried
agreed, on both test models (SmolLM2's Q4_1 already agrees from 2)."""


def key(token: int, evaluated_alone: bool) -> int:
    """The cache key of ``token`` evaluated alone or with neighbours."""
    return token << 1 | evaluated_alone


def token_of(cache_key: int) -> int:
    """The token id of a cache key."""
    return cache_key >> 1


def alone(cache_key: int) -> bool:
    """Whether the token of a cache key is evaluated alone."""
    return bool(cache_key & 1)


def canonical(written: Sequence[bool]) -> tuple[bool, ...]:
    """For each prompt token, whether it is evaluated alone: exactly those the model
    wrote (``written``), as generation evaluated them. Everything else goes with its
    neighbours, the last prompt token too (its logits come from a step of
    :data:`TOGETHER_ROWS` rows or more, warm or cold), so a prompt's ways are the
    start of the ways of every longer prompt that carries it with its answer."""
    return tuple(bool(flag) for flag in written)


def _locate(text: str, pieces: Iterable[str]) -> list[tuple[int, int] | None]:
    """Where each of ``pieces`` sits in ``text`` as a UTF-8 byte range, each looked for
    after the previous one found: as it is when the template kept it so (whitespace the
    model wrote around it included), else stripped of that whitespace; ``None`` for one
    that is blank or not found (the template changed it)."""
    found: list[tuple[int, int] | None] = []
    position, offset = 0, 0  # a character index of text, and its UTF-8 byte offset
    for piece in pieces:
        core = piece.strip()
        at = text.find(core, position) if core else -1
        if at < 0:
            found.append(None)
            continue
        whole = text.find(piece, position) if piece != core else -1
        if 0 <= whole <= at:
            at, core = whole, piece
        start = offset + len(text[position:at].encode("utf-8"))
        end = start + len(core.encode("utf-8"))
        found.append((start, end))
        position, offset = at + len(core), end
    return found


def find_spans(text: str, pieces: Iterable[str]) -> list[tuple[int, int]]:
    """Where each of ``pieces`` (the assistant messages' texts, in order) sits in
    ``text``, as UTF-8 byte ranges; each is looked for after the previous one, and one
    that is not found (the template changed it) is left out."""
    return [span for span in _locate(text, pieces) if span is not None]


def message_spans(
    text: str, messages: Sequence[tuple[Sequence[str], bool]], opening: str = ""
) -> list[tuple[int, int]]:
    """The byte ranges of ``text`` the model wrote, from the conversation's messages in
    order: each is ``(its texts, whether the model wrote it)``, an assistant's texts
    being its reasoning then its answer.

    Every message's texts are looked for in order, each after the previous one found,
    so an answer is found in its own turn, not in an earlier message that holds the
    same words. A written message's range runs from its first text found to its last,
    the template's markup between them included (the end of a reasoning block), and
    back over ``opening`` (the reasoning block's start marker, when the model writes
    it) when it stands right before its reasoning.
    """
    located = iter(_locate(text, [piece for pieces, _ in messages for piece in pieces]))
    spans: list[tuple[int, int]] = []
    encoded: bytes | None = None
    for pieces, written in messages:
        each = [next(located) for _ in pieces]
        found = [span for span in each if span is not None]
        if not written or not found:
            continue
        start, end = found[0][0], found[-1][1]
        if opening and len(each) > 1 and each[0] is not None:  # its reasoning is there
            encoded = text.encode("utf-8") if encoded is None else encoded
            before = encoded[:start].rstrip()
            if before.endswith(opening.encode("utf-8")):
                start = len(before) - len(opening.encode("utf-8"))
        spans.append((start, end))
    return spans


def kinds_from_spans(sizes: Sequence[int], spans: Sequence[tuple[int, int]]) -> list[bool]:
    """For tokens of ``sizes`` bytes each, laid end to end, whether each lies inside
    one of ``spans`` (sorted byte ranges)."""
    flags: list[bool] = []
    offset, index = 0, 0
    for size in sizes:
        start, end = offset, offset + size
        while index < len(spans) and spans[index][1] <= start:
            index += 1
        inside = index < len(spans) and spans[index][0] <= start and end <= spans[index][1]
        flags.append(inside and size > 0)
        offset = end
    return flags
