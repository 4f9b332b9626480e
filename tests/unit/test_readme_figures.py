"""The README's benchmark figures are the benchmarks page's (issue 27).

Why a test: a newcomer found 69.8 / 83.3 in the README against 69.7 / 83.1 in
``docs/benchmarks.md``, and figures ("49–51", "2.5 ms / 242 msg/s") that no docs page had. The
README's "Latest figures" paragraph is copied by hand from the page, so each figure it quotes
(every decimal number, every range, every figure with a unit) must be found there verbatim;
updating the page without the README (or the reverse) then fails here, not in a user's eyes.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START = "Latest figures on the 2-core reference machine"

# 75.9–76.1, 22,712, 2.48, 241.7, 406 MiB, 83 ms, 1.08×
FIGURE = re.compile(
    r"\d+(?:\.\d+)?–\d+(?:\.\d+)?"          # a range, both ends as the page writes them
    r"|\d{1,3}(?:,\d{3})+"                    # 22,712 events/s
    r"|\d+\.\d+"                              # any decimal figure
    r"|\d+ (?:MiB|ms)\b"                      # a whole figure with a unit
)


def _figures_paragraph(readme: str) -> str:
    start = readme.index(START)
    end = readme.index("\n## ", start)
    return readme[start:end]


def test_readme_figures_are_on_the_benchmarks_page() -> None:
    paragraph = _figures_paragraph((ROOT / "README.md").read_text())
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    figures = FIGURE.findall(paragraph)
    assert len(figures) >= 15, figures  # the paragraph was found and still quotes figures
    missing = [f for f in figures if f not in page]
    assert missing == [], f"README figures not on docs/benchmarks.md: {missing}"
