"""erasure benchmark."""
