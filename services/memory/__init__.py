"""The facade and what it wires: ``Memory`` (``facade``), one event store and its parts per
cell (``cell``), the router from agent id to cell (``router``) and the eventsourcing
application that stores the log (``event_log``). ADR-0043 says what goes where.

Empty on purpose: importing ``engramdb.services.memory.cell`` must not load the facade.
"""
