"""Stream N megabytes through one OpenAI turn; print the peak RSS growth in MiB as JSON."""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

import trio

from cuca import CucaClient, ProviderEndpoint, Text, UnifiedRequest
from cuca.stages import after


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main(url: str, megabytes: int) -> None:
    request = UnifiedRequest.new("m").add_user_message("go")
    received = 0
    limit = megabytes * 1024 * 1024

    async def count(receive: Any, send: Any) -> None:
        nonlocal received
        async with send:
            async for batch in receive:
                received += sum(len(chunk) for chunk in batch if isinstance(chunk, bytes))
                await send.send(batch)

    async with CucaClient(
        ProviderEndpoint.OPENAI,
        base_url=url + "/v1",
        api_key="k",
        stages=[after("transport", count)],
    ) as client:
        # warm up: imports, pool, first turn
        async with client.generate_stream(request) as stream:
            async for _ in stream:
                break
        before = peak_rss_mib()
        blocks = 0
        async with client.generate_stream(request) as stream:
            async for item in stream:
                assert isinstance(item, Text)
                blocks += 1
                if received >= limit:
                    break
    print(
        json.dumps(
            {
                "before": before,
                "growth": peak_rss_mib() - before,
                "bytes": received,
                "blocks": blocks,
            }
        )
    )


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
