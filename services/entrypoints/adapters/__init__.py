"""Adapters for agent frameworks (issue 24, ADR-0048): each a small module behind an optional
extra, each a caller of ``AsyncMemory`` (the frameworks are async), nothing more."""
