"""cuca: one request type and one typed stream for every LLM backend, on trio."""
