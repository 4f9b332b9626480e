"""Job ``communities``: groups of densely connected entities → ``CommunityDetected``.

The graph: one node per live entity (merged-away ones folded into their survivor), an edge
per relationship (weight = its strength) and per fact linking two entities (its subject and
a linked entity, weight 0.5 per fact). Louvain modularity (networkx, ``seed=0``) on a graph
built in sorted order is deterministic: unchanged memory finds the same communities, and a
community's id hashes its sorted member keys, so nothing is emitted again (idempotent).
Communities of one entity are not recorded. A community whose membership changed is a new
one; the old id is dissolved (``CommunityDissolved``). Labels are English ("Melanie,
Caroline and 3 others").
"""

from __future__ import annotations

import hashlib

from engramdb.services.jobs.base import Job, JobContext

METHOD = "louvain-v1"
SEED = 0
MAX_LABEL_NAMES = 3

_EDGES_SQL = """
SELECT coalesce(s.merged_into, r.source_key), coalesce(t.merged_into, r.target_key),
       sum(r.strength)
  FROM mem_relationships r
  LEFT JOIN mem_entities s ON s.agent_id = r.agent_id AND s.entity_key = r.source_key
  LEFT JOIN mem_entities t ON t.agent_id = r.agent_id AND t.entity_key = r.target_key
 WHERE r.agent_id = %(a)s
 GROUP BY 1, 2
UNION ALL
SELECT f.entity_key, l.entity_key, 0.5 * count(*)
  FROM mem_fact_entities l
  JOIN mem_facts f ON f.agent_id = l.agent_id AND f.fact_id = l.fact_id AND f.status = 'active'
 WHERE l.agent_id = %(a)s AND NOT l.is_primary
 GROUP BY 1, 2
"""
_NAMES_SQL = ("SELECT entity_key, display_name FROM mem_entities "
              "WHERE agent_id = %(a)s AND merged_into IS NULL")


def community_id(members: list[str]) -> str:
    return "c_" + hashlib.sha256("\x00".join(sorted(members)).encode()).hexdigest()[:16]


def label(members: list[str], names: dict[str, str]) -> str:
    shown = sorted(names.get(m, m.split(":", 1)[-1]) for m in members)
    if len(shown) <= MAX_LABEL_NAMES:
        return ", ".join(shown[:-1]) + " and " + shown[-1]
    rest = len(shown) - MAX_LABEL_NAMES + 1
    return f"{', '.join(shown[:MAX_LABEL_NAMES - 1])} and {rest} others"


def detect(edges: list[tuple[str, str, float]]) -> list[list[str]]:
    """Communities (sorted member lists, 2+ members) of a weighted undirected edge list."""
    import networkx as nx  # imported here: only this job needs it (~0.2 s)

    weights: dict[tuple[str, str], float] = {}
    for a, b, w in edges:
        if a == b:
            continue
        key = (a, b) if a < b else (b, a)
        weights[key] = weights.get(key, 0.0) + float(w)
    graph = nx.Graph()
    for (a, b), w in sorted(weights.items()):
        graph.add_edge(a, b, weight=w)
    if graph.number_of_edges() == 0:
        return []
    found = nx.community.louvain_communities(graph, weight="weight", seed=SEED)
    return sorted(sorted(c) for c in found if len(c) > 1)


def run(ctx: JobContext, agent_id: str) -> int:
    ctx.memory.wait_for_projections()
    with ctx.memory.pool.connection() as conn:
        edges = [(a, b, float(w)) for a, b, w in conn.execute(_EDGES_SQL, {"a": agent_id})]
        names = dict(conn.execute(_NAMES_SQL, {"a": agent_id}).fetchall())
    ctx.check_deadline()
    found = {community_id(m): m for m in detect(edges)}
    jobs = ctx.jobs_aggregate(agent_id)
    changed = 0
    for cid, members in sorted(found.items()):
        changed += jobs.detect_community(cid, members, label(members, names), METHOD)
    for cid in sorted(set(jobs.state_of("communities")) - set(found)):
        changed += jobs.dissolve_community(cid, "its membership changed or its links are gone")
    if changed:
        ctx.save(jobs)
    return changed


JOB = Job("communities", run, "communities of the entity graph (Louvain) -> CommunityDetected")
