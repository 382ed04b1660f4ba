"""Orchestration of a run, the same on every engine: action identity, cache, retries, records."""
