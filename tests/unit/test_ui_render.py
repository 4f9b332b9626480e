"""The inspector's pure parts: escaping and clipping of untrusted text, URL segments, time
parsing of forms, and the graph layout (no server, no browser)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engramdb.services.entrypoints.http.ui.calls import UIError, instant
from engramdb.services.entrypoints.http.ui.graph_svg import layout
from engramdb.services.entrypoints.http.ui.render import clip, env, seg
from engramdb.services.management.inspect_models import EntityGraph, GraphEdge, GraphNode


def test_templates_escape_markup_and_reveal_bidi_controls() -> None:
    macro = env.from_string('{% import "macros.html" as m %}{{ m.ut(t) }}')
    html = macro.render(t="<script>alert(1)</script>\u202eabc")
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "\u202e" not in html and "[U+202E]abc" in html
    assert html.startswith('<bdi class="ut">')


def test_clip_cuts_long_lines() -> None:
    assert clip("x" * 500, 10) == "x" * 10 + "…"
    assert clip(None) == ""


def test_seg_encodes_every_reserved_character() -> None:
    assert seg("a/b?c#d e") == "a%2Fb%3Fc%23d%20e"
    assert seg("javascript:alert(1)") == "javascript%3Aalert%281%29"


def test_instant_parses_iso_with_or_without_zone() -> None:
    assert instant("2026-03-28", "at") == datetime(2026, 3, 28, tzinfo=UTC)
    assert instant("2026-03-28T14:00:00Z", "at") == datetime(2026, 3, 28, 14, tzinfo=UTC)
    # a '+' that a hand-typed URL decoded as a space
    assert instant("2026-03-28T14:00:00 00:00", "at") == datetime(2026, 3, 28, 14, tzinfo=UTC)
    assert instant("", "at") is None
    with pytest.raises(UIError) as err:
        instant("yesterday", "at")
    assert err.value.status == 400 and "at" in err.value.message


def test_layout_puts_the_hub_in_the_middle_and_scales_edges() -> None:
    nodes = [GraphNode(entity_key=k, display_name=k, entity_type="person", active_facts=i)
             for i, k in enumerate(["hub", "a", "b", "c"])]
    edges = [GraphEdge(source_key="hub", target_key=k, relation_type="knows", strength=s,
                       mentions=1) for k, s in (("a", 1.0), ("b", 2.0), ("c", 4.0))]
    drawing = layout(EntityGraph(nodes=nodes, edges=edges))
    hub = next(d for d in drawing.dots if d.key == "hub")
    assert (hub.x, hub.y) == (drawing.width / 2, drawing.height / 2)
    widths = sorted(line.width for line in drawing.lines)
    assert widths[0] < widths[-1] == 5.0
    assert all("knows" in line.label for line in drawing.lines)
