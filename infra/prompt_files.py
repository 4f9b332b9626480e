"""Versioned prompt files: ``infra/prompts/<name>_<vN>.md`` loaded as (system, user) templates.

Why in infra: the prompts are package data next to this module, and every LLM use (extraction,
entity resolution, rerank) must read and fill them the same way. A file has one line
``=== system ===`` and one ``=== user ===`` (standing alone: the header above may mention them);
``{{name}}`` placeholders are filled in one pass, so message text is never re-scanned.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel

SYSTEM_MARK = "=== system ==="
USER_MARK = "=== user ==="
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class PromptTemplate(BaseModel):
    version: str
    system: str
    user: str

    def render(self, values: dict[str, str]) -> tuple[str, str]:
        """Fill ``{{name}}`` placeholders in one pass (unknown names stay as they are)."""

        def fill(template: str) -> str:
            return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)

        return fill(self.system), fill(self.user)


def _prompt_text(filename: str) -> str:
    try:
        return resources.files("engramdb.infra").joinpath("prompts", filename).read_text("utf-8")
    except (FileNotFoundError, ModuleNotFoundError, NotADirectoryError):
        # Source checkout without the package installed: the folder next to this module.
        return (Path(__file__).resolve().parent / "prompts" / filename).read_text("utf-8")


@lru_cache(maxsize=8)
def load_prompt(version: str) -> PromptTemplate:
    """Load the prompt for a version string like ``extraction/v1``."""
    filename = version.replace("/", "_") + ".md"
    text = _prompt_text(filename)
    parts = re.split(rf"^{re.escape(SYSTEM_MARK)}$|^{re.escape(USER_MARK)}$", text, flags=re.M)
    if len(parts) != 3:
        raise ValueError(f"prompt {filename} needs one {SYSTEM_MARK!r} and one {USER_MARK!r} line")
    _, system, user = parts
    return PromptTemplate(version=version, system=system.strip(), user=user.strip())
