"""async API benchmark (issue 24)."""
