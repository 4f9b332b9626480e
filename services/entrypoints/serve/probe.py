"""The image's ``HEALTHCHECK``: is this container's ``engramdb serve`` ready? (ADR-0050)

Why a module and not ``curl``: the slim Python base image has no curl or wget, and a module
run with the image's own interpreter needs nothing installed. It asks ``/readyz`` on
loopback (open without a key; status only, ADR-0011) at ``ENGRAMDB_HTTP_PORT`` and exits 0
when ready, 1 otherwise, with one line saying why — what ``docker inspect`` shows as the
health log.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request


def probe(port: int, timeout: float = 4.0) -> tuple[bool, str]:
    """(ready, one line) from ``GET http://127.0.0.1:<port>/readyz``."""
    url = f"http://127.0.0.1:{port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - fixed loopback URL
            return True, f"ready ({response.status})"
    except urllib.error.HTTPError as exc:
        return False, f"not ready ({exc.code}): {_reasons(exc.read())}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, f"no answer from {url}: {reason}"


def _reasons(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace")
    reasons = data.get("reasons") if isinstance(data, dict) else None
    return "; ".join(map(str, reasons)) if reasons else json.dumps(data)[:200]


def main() -> int:
    port = int(os.environ.get("ENGRAMDB_HTTP_PORT") or 8787)
    ok, line = probe(port)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
