"""The write use case (docs/spec.md §2): a conversation message in, decisions out, one atomic commit.

``messages`` (the message's schema, limits and subject scheme), ``pipeline`` (record →
pre-retrieval → extraction → resolution → reconciliation → commit), ``models`` (its
configuration and result), and the steps it calls.
"""
