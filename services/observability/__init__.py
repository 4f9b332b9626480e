"""What a process tells about itself: readiness (``health``) and Prometheus metrics (``metrics``)."""
