"""The HTTP API (FastAPI): ``api.create_app`` wires the routers, auth, guards and offline docs."""
