"""A process that logs turns, then dies mid-turn: ``session_log_child.py DB URL TURNS``.

It runs TURNS turns to their end against the replay server at URL, prints ``done N``
after each (once the log says it is on disk), then starts one more and prints
``streaming`` once its first block arrived; the test kills it there with SIGKILL.
"""

from __future__ import annotations

import sys

import trio

from cuca import CucaClient, ProviderEndpoint, SessionLog, UnifiedRequest


async def main(db: str, url: str, turns: int) -> None:
    log = SessionLog(db, raw=True)
    async with CucaClient(
        ProviderEndpoint.OPENAI, base_url=url + "/v1", api_key="k", plugins=[log]
    ) as client:
        for index in range(turns):
            await client.generate(UnifiedRequest.new("gpt-4o").add_user_message(f"turn {index}"))
            await trio.to_thread.run_sync(log.flush)  # the turn is on disk
            print(f"done {index}", flush=True)
        request = UnifiedRequest.new("gpt-4o").add_user_message("the last turn")
        async with client.generate_stream(request) as stream:
            async for _ in stream:
                await trio.to_thread.run_sync(log.flush)  # its 'running' row is on disk
                print("streaming", flush=True)
                await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
