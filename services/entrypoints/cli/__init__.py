"""The ``engramdb`` command line (Typer): ``main`` holds the app, one module per command family."""
