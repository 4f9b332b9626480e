"""jobs benchmark."""
