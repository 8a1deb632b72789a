"""The ``/responses`` wire (OpenAI's Responses API).

Everything this wire knows, both directions."""
