"""Gemini's ``streamGenerateContent`` wire.

Everything this wire knows, both directions."""
