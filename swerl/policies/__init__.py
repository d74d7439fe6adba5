"""Policies: scripted (gold, no-op, replay), LLM (OpenAI-compatible), and a learnable toy."""
