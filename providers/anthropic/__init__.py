"""The Anthropic Messages wire (``/messages``): Anthropic and DeepSeek's bridge.

Everything this wire knows, both directions."""
