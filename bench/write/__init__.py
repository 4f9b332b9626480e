"""write benchmark."""
