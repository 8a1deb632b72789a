"""A wire's batch format bound to a client's connections: the backend of a vendor's
batch job. The wire reads the vendor's JSON; this turns each answer it decoded into
the :class:`~cuca.Completion` a turn would have given, priced at the batch rate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from cuca.assemble import BlockAssembler
from cuca.batch_wire import Answer, BatchWire, Send, VendorJob
from cuca.errors import CucaError
from cuca.stream import Completion, completion
from cuca.types import ProviderEndpoint, UnifiedRequest, UnifiedResponse

__all__ = ["WireBatches", "answered"]


@attrs.frozen
class WireBatches:
    """The backend of a vendor batch: ``wire`` sends through ``send``; ``gates`` are
    the client's plugins (a :class:`~cuca.Budget` among them reserves the job)."""

    provider: ProviderEndpoint
    wire: BatchWire
    send: Send
    gates: Sequence[object] = ()

    async def submit(self, entries: Sequence[tuple[str, UnifiedRequest]], label: str) -> VendorJob:
        return await self.wire.submit(entries, label, self.send)

    async def poll(self, vendor_id: str) -> VendorJob:
        return await self.wire.poll(vendor_id, self.send)

    async def cancel(self, vendor_id: str) -> VendorJob:
        return await self.wire.cancel(vendor_id, self.send)

    async def results(
        self, job: VendorJob, requests: Mapping[str, UnifiedRequest]
    ) -> dict[str, Completion | CucaError]:
        found = await self.wire.results(job, requests, self.send)
        return {
            custom: answered(outcome, requests[custom]) if isinstance(outcome, Answer) else outcome
            for custom, outcome in found.items()
            if custom in requests
        }


def answered(answer: Answer, request: UnifiedRequest) -> Completion:
    """The :class:`Completion` of one batch answer: its blocks merged as a stream's
    are, the errors that did not end it, and a response marked ``batch`` (its cost is
    the batch rate's), the answer parsed when the request had an output schema."""
    assembler = BlockAssembler()
    assembler.feed(answer.items)
    errors = [item for item in answer.items if isinstance(item, CucaError)]
    summary = answer.summary
    response = UnifiedResponse(
        provider=request.provider,
        model=request.model,
        usage=summary.usage,
        prompt_cache_usage=summary.prompt_cache_usage,
        finish_reason=summary.finish_reason,
        counted_usage=summary.counted_usage,
        batch=True,
        provider_finish_reason=summary.provider_finish_reason,
    )
    return completion(assembler.message(), errors, response, request.output_schema)
