"""load benchmark."""
