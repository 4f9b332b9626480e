"""latency benchmark."""
