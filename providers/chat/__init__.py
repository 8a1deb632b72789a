"""The ``/chat/completions`` wire: OpenAI, vLLM, LM Studio, DeepSeek's native route and
llama.cpp's chat route.

Everything this wire knows, both directions."""
