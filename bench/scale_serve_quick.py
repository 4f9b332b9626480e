"""Superseded by ``python -m bench.scale`` (issue 13, item 5); kept as a thin alias.

``python -m bench.scale_serve_quick`` = ingest only (no retrieve phase, no rebuild), offline
extractor, 1 and 3 serve processes, 2 runs — the quick measurement docs/scaling.md first quoted.
"""

from __future__ import annotations

from bench.scale import main

if __name__ == "__main__":
    main(["--processes", "1,3", "--runs", "2", "--agents", "50", "--extractors", "offline",
          "--no-retrieve", "--rebuild", ""])
