"""scale benchmark."""
