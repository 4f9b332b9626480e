"""embedders benchmark."""
