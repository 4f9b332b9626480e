"""NATS surfaces: the ingest consumer (``ingest``), the publisher, retrieve and management
request/reply, and publisher identities (``users``)."""
