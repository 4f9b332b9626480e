"""shared benchmark."""
