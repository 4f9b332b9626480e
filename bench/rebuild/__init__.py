"""rebuild benchmark."""
