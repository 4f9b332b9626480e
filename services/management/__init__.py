"""Managing memory (ADR-0016): read queries over the read models (``queries``), commands that
are events (``commands``), audit from the log (``audit``), erasure (``erase``), re-extraction
(``reprocess``), deferred extractions and their retrier (``pending``, ``retrier``), and the
shapes every surface shares (``models``).
"""
