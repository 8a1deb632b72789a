"""How each prompt token is evaluated, so that a warm turn gives the bits of a cold one.

llama.cpp's CPU attention rounds differently for a token evaluated alone (one row of
its sequence in a step: generation) and for one evaluated with others of its sequence
(two rows or more: prefill, where a matrix kernel takes over). Within each of the two
ways a row's bits do not depend on its step (tested: any split of a prompt into steps
of two rows or more gives the same bits). So the exact mode gives every prompt token a
*way*, a pure function of the prompt (:func:`canonical`), and evaluates it that way:

* tokens the model wrote itself in earlier turns (an assistant message's text, which
  generation evaluated one at a time), the token before each (the end of the prompt
  it answered), and the last prompt token, alone;
* every other token with its neighbours, in steps of two rows or more.

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
    "alone",
    "canonical",
    "find_spans",
    "keep_whole_runs",
    "key",
    "kinds_from_spans",
    "message_spans",
    "token_of",
]


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
    """For each prompt token, whether it is evaluated alone: those the model wrote
    (``written``) and the one before each of them (the last token of the prompt they
    were generated after), the last one (its logits come from a lone row, as the next
    turn expects of it), and any token whose neighbours are all evaluated alone (a step
    of one row is a lone row)."""
    flags = list(written)
    for i in range(len(flags) - 1):
        flags[i] = flags[i] or written[i + 1]
    if flags:
        flags[-1] = True
    for i, flag in enumerate(flags):
        if flag:
            continue
        before = i > 0 and not flags[i - 1]
        after = i + 1 < len(flags) and not flags[i + 1]
        if not (before or after):
            flags[i] = True
    return tuple(flags)


def keep_whole_runs(prompt: Sequence[int], keep: int) -> int:
    """``keep`` lowered by one if what is left of a run of tokens evaluated together
    would be a single token (a step of one row would evaluate it alone): the one
    before it is evaluated again with it, which gives it the same bits as before."""
    if 0 < keep < len(prompt) and not alone(prompt[keep]) and not alone(prompt[keep - 1]):
        if keep + 1 == len(prompt) or alone(prompt[keep + 1]):
            return keep - 1
    return keep


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
