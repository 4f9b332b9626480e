"""Where requests come in: the command line, HTTP, MCP, NATS and the long-running ``serve``.

An entry point parses, authenticates and renders; it reaches memory through the facade
(``engramdb.services.memory.facade.Memory``) and the shapes of the use cases, never by
calling a use case's internals (import-linter contracts in ``pyproject.toml``, ADR-0043).
"""
