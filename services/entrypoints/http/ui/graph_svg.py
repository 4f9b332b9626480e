"""Where the entity graph's nodes go: a server-side circular layout (centre node in the
middle) for an SVG the template draws. No JS library: the graph is at most the 60 strongest
edges (``Memory.entity_graph``), and an SVG of links is keyboard-navigable and inert by
construction (text is escaped by the template like everywhere else)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from engramdb.services.management.inspect_models import EntityGraph

WIDTH = 720
HEIGHT = 520


@dataclass(frozen=True)
class Dot:
    key: str
    name: str
    kind: str
    facts: int
    community: str | None
    x: float
    y: float
    r: float


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    width: float
    label: str
    tx: float
    ty: float


@dataclass(frozen=True)
class Drawing:
    width: int
    height: int
    dots: list[Dot]
    lines: list[Line]
    community_names: dict[str, str]


def layout(graph: EntityGraph) -> Drawing:
    """Nodes on a circle (the centre, if any, in the middle), radius by active facts, edge
    width by strength; communities are numbered C1, C2… so the drawing needs no colour."""
    names = {c.community_id: f"C{i + 1}" for i, c in enumerate(graph.communities)}
    cx, cy, ring = WIDTH / 2, HEIGHT / 2, min(WIDTH, HEIGHT) / 2 - 70
    degree: dict[str, int] = {}
    for e in graph.edges:
        for k in (e.source_key, e.target_key):
            degree[k] = degree.get(k, 0) + 1
    # the centre asked for, else the best-connected node when it touches most edges (a star)
    hub = graph.center
    if hub is None and degree:
        best = max(sorted(degree), key=lambda k: degree[k])
        hub = best if degree[best] * 2 > len(graph.edges) else None
    others = [n for n in graph.nodes if n.entity_key != hub]
    spots: dict[str, tuple[float, float]] = {}
    for node in graph.nodes:
        if node.entity_key == hub:
            spots[node.entity_key] = (cx, cy)
    for i, node in enumerate(others):
        angle = 2 * math.pi * i / max(1, len(others)) - math.pi / 2
        spots[node.entity_key] = (cx + ring * math.cos(angle), cy + ring * math.sin(angle))
    dots = [
        Dot(n.entity_key, n.display_name, n.entity_type, n.active_facts,
            names.get(n.community or ""), *spots[n.entity_key],
            r=8 + 4 * math.log1p(n.active_facts))
        for n in graph.nodes
    ]
    top = max((e.strength for e in graph.edges), default=1.0) or 1.0
    lines = []
    for e in graph.edges:
        if e.source_key not in spots or e.target_key not in spots:
            continue
        (x1, y1), (x2, y2) = spots[e.source_key], spots[e.target_key]
        lines.append(Line(x1, y1, x2, y2, 1 + 4 * e.strength / top,
                          f"{e.relation_type} ({e.strength:g})", (x1 + x2) / 2, (y1 + y2) / 2))
    return Drawing(WIDTH, HEIGHT, dots, lines, names)
