"""Serve an endless OpenAI-style stream on loopback until killed; print the URL first."""

from __future__ import annotations

import json
import sys

import trio

from cuca.testing import Reply, open_replay_server


async def main(frame_chars: int) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "x" * frame_chars}}]}
    frame = f"data: {json.dumps(chunk)}\n\n".encode()
    async with open_replay_server(Reply.endless(frame)) as server:
        print(server.url, flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
