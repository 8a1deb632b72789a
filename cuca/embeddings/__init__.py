"""Embeddings: ``await client.embed(texts, model=...)`` on every backend that has them.

:func:`embed` splits the texts into requests of the backend's size, answers what the
client's :class:`~cuca.ResponseCache` kept, admits each request through the client's
gates (the rate limiter, a budget), sends them concurrently, checks every answer, and
returns :class:`Embeddings`: a vector per text in input order, with exact usage and cost
where the vendor reports them. See docs/embeddings.md.
"""

from .result import Embeddings
from .run import DEFAULT_CONCURRENCY, EmbeddingTarget, embed

__all__ = ["DEFAULT_CONCURRENCY", "EmbeddingTarget", "Embeddings", "embed"]
