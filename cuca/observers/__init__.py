"""Observers of turns: the session log (every turn in SQLite), OpenTelemetry traces, and
the redaction of what they store. Each is a plugin: it sees a turn through the hooks and
the observer events, and never changes what the user receives."""
