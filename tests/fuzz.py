"""The nightly fuzzer: mutate every provider's transcripts for a time budget.

    .venv/bin/python tests/fuzz.py --seconds 600        (or: make fuzz)

Each input goes through the provider's framer and decoder under a random chunking.
Anything but a clean end or a ``CucaError``, or a different result under another
chunking, is a finding: the input is saved under ``tests/fuzz_corpus/<provider>/``,
where ``tests/test_fuzz_corpus.py`` replays it on every test run from then on.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import itertools

from conformance.targets import TARGETS, Target, decode

from cuca import CucaError

CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"
TOKENS = [
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"data: ",
    b"event: ",
    b":",
    b"{",
    b"}",
    b'"',
    b"[DONE]",
    b"\xff",
    b"\x00",
    b"\xe2\x80",
    b"[",
    b"]",
    b"null",
    b"-1",
    b"1e999",
]


def mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if not out:
            out += rng.choice(TOKENS)
            continue
        at = rng.randrange(len(out))
        match rng.randrange(5):
            case 0:
                out[at] = rng.randrange(256)
            case 1:
                del out[at : at + rng.randint(1, 16)]
            case 2:
                out[at:at] = rng.choice(TOKENS)
            case 3:
                end = min(len(out), at + rng.randint(1, 64))
                out[at:at] = out[at:end]
            case _:
                del out[at:]
    return bytes(out)


def chunks(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(len(data) + 1), k=min(len(data) + 1, rng.randint(0, 12))))
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def finding(target: Target, data: bytes, rng: random.Random) -> str | None:
    whole = decode(target, [data])
    if whole[1] is not None and not isinstance(whole[1], CucaError):
        return f"raised {type(whole[1]).__name__}: {whole[1]}"
    again = decode(target, chunks(data, rng))
    if (again[0], type(again[1])) != (whole[0], type(whole[1])):
        return "chunking changed the result"
    return None


def save(target: Target, data: bytes, why: str) -> Path:
    folder = CORPUS / target.name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.bin"
    path.write_bytes(data)
    print(f"{target.name}: {why} -> {path.relative_to(CORPUS.parent)}")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="total budget")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    seeds = [(t, t.transcript(n)) for t in TARGETS for n in t.transcripts]
    deadline = time.monotonic() + args.seconds
    runs = found = 0
    while time.monotonic() < deadline:
        target, base = rng.choice(seeds)
        data = mutate(base, rng)
        runs += 1
        why = finding(target, data, rng)
        if why is not None:
            save(target, data, why)
            found += 1
    print(f"{runs} inputs, {found} findings")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
