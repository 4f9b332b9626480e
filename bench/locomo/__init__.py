"""locomo benchmark."""
