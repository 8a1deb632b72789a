"""Batches: many requests submitted as one job, answered within a day at the vendor's
batch rate (OpenAI's Batch API, Anthropic's Message Batches, Gemini's batch mode), or
run as concurrent turns on the local engine. See docs/batches.md.

``job = await client.batch(requests)``, ``await job.wait()``, ``await job.results()``;
``await client.batch_job(job.id, store=...)`` finds the job again after a restart.
"""

from cuca.batch_wire import BatchCounts as BatchCounts
from cuca.batch_wire import BatchState as BatchState

from .job import BatchJob as BatchJob
from .job import BatchResults as BatchResults
from .job import BatchStatus as BatchStatus
from .polling import BatchPolling as BatchPolling

__all__ = ["BatchCounts", "BatchJob", "BatchPolling", "BatchResults", "BatchState", "BatchStatus"]
