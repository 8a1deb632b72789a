"""A turn's blocks kept as they came, compactly: what a cache records of a live turn.

A turn that a cache will keep is recorded block by block, as the backend's decoder
gave them: a hit must give back the very same deltas, in the same chunks. Held as
blocks, a 20,000-delta answer is 20,000 objects alive until the turn ends, and the
garbage collector walks them again at every collection: in a fused turn that costs
more than the rest of the recording. A :class:`Recording` holds each run of *plain*
deltas (a :class:`~cuca.types.Text` or :class:`~cuca.types.Thinking` with no field set
but its text) as one :class:`Run` of their strings, which the collector does not walk,
and every other block whole, in its place. It is fed a batch at a time and finds the
runs in C (``groupby``, ``attrgetter``): no Python step per delta.

It is a sequence of the blocks it was fed (a block made again from its string when
read); the response cache writes its runs into an entry as they are
(:mod:`cuca.cache`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, groupby, islice
from operator import attrgetter
from typing import Any, overload

import attrs

from .types import Block, Text, Thinking

__all__ = ["Recording", "Run"]

Plain = type[Text] | type[Thinking]


@attrs.define
class Run:
    """Consecutive plain deltas of one ``kind``: one string each, in order (a run grows
    while its turn streams, so it is mutable and not hashable)."""

    kind: Plain
    texts: list[str]

    def blocks(self) -> Iterator[Block]:
        """The deltas again, one block a string."""
        return map(self.kind, self.texts)


Rule = tuple[Plain, Callable[[Any], Any], tuple[Any, ...]]


def _plain_rule(cls: Plain) -> Rule:
    """``cls``, its fields besides its text (read at once) and their defaults: a delta
    whose fields all hold their defaults is plain. Read from the class, so that a field
    added to it is never dropped from a run."""
    fields = [field for field in attrs.fields(cls) if field.name != "text"]
    names = [field.name for field in fields]
    read: Callable[[Any], Any]
    if len(names) > 1:
        read = attrgetter(*names)  # a tuple, found in C
    else:  # attrgetter of one name gives the value itself, of none it cannot be made
        read = lambda block: tuple(getattr(block, name) for name in names)  # noqa: E731
    return cls, read, tuple(f.default for f in fields)


_PLAIN: dict[type, Rule] = {Text: _plain_rule(Text), Thinking: _plain_rule(Thinking)}
_TEXT = attrgetter("text")


class Recording(Sequence[Block]):
    """Blocks kept as they arrive (see the module): :meth:`extend` with each batch;
    :attr:`parts` holds the runs of plain deltas and the other blocks, in order."""

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        self.parts: list[Block | Run] = []
        self.extend(blocks)

    def extend(self, blocks: Iterable[Block]) -> None:
        """Keep ``blocks`` after those kept so far; a run of plain deltas goes on the
        run before it when that is of the same kind."""
        parts = self.parts
        for cls, group in groupby(blocks, type):
            rule = _PLAIN.get(cls)
            if rule is None:
                parts.extend(group)
                continue
            kind, fields, unset = rule
            for values, same in groupby(group, fields):
                if values != unset:
                    parts.extend(same)
                    continue
                last = parts[-1] if parts else None
                if type(last) is Run and last.kind is kind:
                    last.texts.extend(map(_TEXT, same))
                else:
                    parts.append(Run(kind, list(map(_TEXT, same))))

    def __iter__(self) -> Iterator[Block]:
        return chain.from_iterable(
            part.blocks() if isinstance(part, Run) else (part,) for part in self.parts
        )

    def __len__(self) -> int:
        return sum(len(part.texts) if isinstance(part, Run) else 1 for part in self.parts)

    @overload
    def __getitem__(self, index: int) -> Block: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Block]: ...

    def __getitem__(self, index: int | slice) -> Block | Sequence[Block]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("recording index out of range")
        return next(islice(self, index, None))

    def __repr__(self) -> str:
        return f"Recording({list(self)!r})"
