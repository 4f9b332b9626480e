"""``--cv GRID.json``: leave-one-conversation-out cross-validation of retrieve constants.

Why: a weight or threshold chosen by looking at the dev file's results is fitted to it, and
its score on that same file is optimistic. Honest figures come from choosing on some
conversations and scoring on one the choice never saw. So: for each of the K folds (K =
conversations in the run), the candidate with the best mean Recall@10 over the categories
1–4 questions of the *other* K−1 conversations is chosen, and the held-out conversation is
scored with it. The headline is those held-out scores pooled (question-weighted) over the
K folds; the in-sample best (chosen and scored on everything) is a diagnostic only.

Selection rules: the objective is the plain mean of per-question Recall@10 over the
training questions of categories 1–4 (question-weighted, as "overall" is); category 5 never
counts. A candidate must beat the best so far by more than ``TIE_EPSILON`` to replace it, so
ties go to the first in the grid — put the default config first and it wins every tie.

Nothing here knows about LoCoMo beyond the row format (``qid``, ``category``, metrics):
``cross_validate`` takes per-question rows keyed by candidate and a question → fold map, so
the same machinery can choose any system's constants (a baseline's included) from variant
runs scored the same way.

Grid format: a JSON list of ``{"name": str, "config_overrides": {...}}`` — retrieve
``RetrieveConfig`` fields, merged over the run's base overrides (dict fields merge, as
``with_overrides`` does). Every candidate is validated before anything is ingested.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.locomo.data import CATEGORY_NAMES, SCORED_CATEGORIES
from bench.locomo.run import ENGRAMDB, KS, REFERENCES, aggregate

OBJECTIVE = "recall@10"
# ``--cv-objective``: "recall@10+20" is the mean of the two, for a candidate that only reorders
# ranks 11-20 (its R@10 ties the default's, so plain R@10 would always keep the default)
OBJECTIVES = ("recall@10", "recall@20", "recall@10+20")
TIE_EPSILON = 1e-9
CV_SYSTEM = f"{ENGRAMDB} (cross-validated)"

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Candidate:
    name: str
    overrides: dict[str, Any]


class GridError(ValueError):
    """A grid file that cannot be used (shape, duplicate names, invalid overrides)."""


def parse_grid(raw: Any) -> list[Candidate]:
    """Candidates from the grid's JSON value, each override set checked against
    ``RetrieveConfig`` (a misspelt key fails here, before a long ingest)."""
    from engramdb.services.retrieve.config import RetrieveConfig

    if not isinstance(raw, list) or not raw:
        raise GridError("grid must be a non-empty JSON list of {name, config_overrides}")
    out: list[Candidate] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            raise GridError(f"grid[{i}]: expected an object with a non-empty 'name'")
        unknown = set(item) - {"name", "config_overrides"}
        if unknown:
            raise GridError(f"grid[{i}] ({item['name']}): unknown key(s) {sorted(unknown)}")
        overrides = item.get("config_overrides", {})
        if not isinstance(overrides, dict):
            raise GridError(f"grid[{i}] ({item['name']}): config_overrides must be an object")
        try:
            RetrieveConfig().with_overrides(overrides)
        except ValueError as exc:
            raise GridError(f"grid[{i}] ({item['name']}): {exc}") from exc
        out.append(Candidate(item["name"], dict(overrides)))
    names = [c.name for c in out]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise GridError(f"grid: duplicate candidate name(s) {duplicates}")
    return out


def load_grid(path: Path) -> list[Candidate]:
    return parse_grid(json.loads(path.read_text(encoding="utf-8")))


# ----------------------------------------------------------------------------- selection


def objective(rows: Sequence[Row], metric: str = OBJECTIVE) -> float:
    """Mean per-question ``metric`` (Recall@10 by default; "recall@10+20": the mean of R@10
    and R@20) over categories 1–4 (NaN when there are none)."""
    if metric not in OBJECTIVES:
        raise ValueError(f"unknown CV objective {metric!r}; expected one of {', '.join(OBJECTIVES)}")
    keys = metric.replace("+", "+recall@").split("+") if "+" in metric else [metric]
    values = [statistics.fmean(float(r[k]) for k in keys) for r in rows if r["category"] in SCORED_CATEGORIES]
    return statistics.fmean(values) if values else float("nan")


def best_candidate(rows_by_candidate: Mapping[str, Sequence[Row]], metric: str = OBJECTIVE) -> str:
    """The first candidate (grid order) whose objective no later one beats by > epsilon."""
    best: str | None = None
    best_score = float("-inf")
    for name, rows in rows_by_candidate.items():
        score = objective(rows, metric)
        if score == score and score > best_score + TIE_EPSILON:
            best, best_score = name, score
    return best if best is not None else next(iter(rows_by_candidate))


@dataclass(frozen=True)
class Fold:
    held_out: str
    chosen: str
    train_objective: dict[str, float]  # every candidate's objective on the training folds
    held_out_rows: list[dict[str, Any]]  # the chosen candidate's rows of the held-out fold
    held_out_objective: dict[str, float]  # every candidate's, for the diagnostic table


def cross_validate(
    rows_by_candidate: Mapping[str, Sequence[Row]], fold_of: Mapping[str, str], metric: str = OBJECTIVE
) -> list[Fold]:
    """One ``Fold`` per distinct value of ``fold_of`` (in first-seen order): choose on the
    other folds' rows, keep the chosen candidate's rows of the held-out one."""
    if not rows_by_candidate:
        raise ValueError("cross_validate: no candidates")
    folds = list(dict.fromkeys(fold_of.values()))
    if len(folds) < 2:
        raise ValueError("cross_validate: need at least 2 folds (conversations)")
    out: list[Fold] = []
    for held_out in folds:
        train = {
            name: [r for r in rows if fold_of[r["qid"]] != held_out]
            for name, rows in rows_by_candidate.items()
        }
        test = {
            name: [dict(r) for r in rows if fold_of[r["qid"]] == held_out]
            for name, rows in rows_by_candidate.items()
        }
        chosen = best_candidate(train, metric)
        out.append(
            Fold(
                held_out=held_out,
                chosen=chosen,
                train_objective={n: objective(r, metric) for n, r in train.items()},
                held_out_rows=test[chosen],
                held_out_objective={n: objective(r, metric) for n, r in test.items()},
            )
        )
    return out


def cv_summary(
    candidates: Sequence[Candidate],
    rows_by_candidate: Mapping[str, Sequence[Row]],
    fold_of: Mapping[str, str],
    metric: str = OBJECTIVE,
) -> dict[str, Any]:
    """The JSON-ready CV result: held-out table, folds, in-sample diagnostic, raw rows."""
    folds = cross_validate(rows_by_candidate, fold_of, metric)
    held_out_rows = [r for f in folds for r in f.held_out_rows]
    in_sample = {name: aggregate([dict(r) for r in rows]) for name, rows in rows_by_candidate.items()}
    best = best_candidate(rows_by_candidate, metric)
    return {
        "objective": f"mean {metric} over categories 1-4 of the training conversations",
        "folds": [
            {
                "held_out": f.held_out,
                "chosen": f.chosen,
                "n_held_out": sum(1 for r in f.held_out_rows if r["category"] in SCORED_CATEGORIES),
                "train_objective": f.train_objective,
                "held_out_objective": f.held_out_objective,
            }
            for f in folds
        ],
        "held_out": {"by_category": aggregate(held_out_rows), "questions": held_out_rows},
        "in_sample": {
            "diagnostic_only": True,
            "best": best,
            "by_candidate": {
                c.name: {"overrides": c.overrides, "by_category": in_sample[c.name]}
                for c in candidates
            },
        },
        "candidates": {
            c.name: {"overrides": c.overrides, "questions": [dict(r) for r in rows_by_candidate[c.name]]}
            for c in candidates
        },
    }


# ----------------------------------------------------------------------------- report


def _fmt(x: float) -> str:
    return "—" if x != x else f"{x:.1f}"


def cv_markdown(
    cv: Mapping[str, Any], summaries: Mapping[str, Mapping[str, Any]], meta: Mapping[str, Any]
) -> str:
    """The CV report: held-out table beside the same-run references, folds, diagnostic."""
    systems: dict[str, Mapping[str, Any]] = {CV_SYSTEM: cv["held_out"]["by_category"]}
    systems.update({n: summaries[n]["by_category"] for n in REFERENCES if n in summaries})
    cats = [CATEGORY_NAMES[c] for c in SCORED_CATEGORIES] + ["overall", CATEGORY_NAMES[5]]
    folds = cv["folds"]
    first = next(iter(cv["candidates"]))
    lines = [
        f"# LoCoMo retrieval — cross-validated, mode `{meta['mode']}`",
        "",
        f"Grid `{meta.get('cv_grid', '?')}`: {len(cv['candidates'])} candidate(s). "
        f"Leave-one-conversation-out over {len(folds)} conversations: for each fold the "
        f"candidate with the best {cv['objective']} is chosen (ties: the first in the grid, "
        f"`{first}`) and scores the held-out conversation. Held-out figures are pooled over "
        "the folds, question-weighted. The references need no fitting: their figures are "
        "the same run's, over the same questions.",
        "",
        "## Held-out (headline), categories 1–4",
        "",
        "| system | n | R@5 | R@10 | R@20 | All@20 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, by in systems.items():
        o = by["overall"]
        lines.append(
            f"| {name} | {int(o['n'])} | {_fmt(o['recall@5'])} | {_fmt(o['recall@10'])} | "
            f"{_fmt(o['recall@20'])} | {_fmt(o['all@20'])} |"
        )
    lines += [
        "",
        "## Held-out by category",
        "",
        "| category | system | n | " + " | ".join(f"R@{k}" for k in KS) + " |",
        "|---|---|---:|" + "---:|" * len(KS),
    ]
    for cat in cats:
        for name, by in systems.items():
            r = by[cat]
            lines.append(
                f"| {cat} | {name} | {int(r['n'])} | "
                + " | ".join(_fmt(r[f"recall@{k}"]) for k in KS)
                + " |"
            )
    lines += [
        "",
        "## Folds",
        "",
        "| held out | n (1–4) | chosen | train objective (chosen) | train objective "
        f"(`{first}`) | held-out objective (chosen) | held-out objective (`{first}`) |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for f in folds:
        tr, te = f["train_objective"], f["held_out_objective"]
        lines.append(
            f"| {f['held_out']} | {f['n_held_out']} | `{f['chosen']}` | "
            f"{_fmt(100 * tr[f['chosen']])} | {_fmt(100 * tr[first])} | "
            f"{_fmt(100 * te[f['chosen']])} | {_fmt(100 * te[first])} |"
        )
    diag = cv["in_sample"]
    lines += [
        "",
        "## In-sample (diagnostic only — chosen and scored on the same conversations)",
        "",
        "Optimistic by construction; not a generalisation figure. "
        f"In-sample best: `{diag['best']}`.",
        "",
        "| candidate | overrides | R@5 | R@10 | R@20 | "
        + " | ".join(f"{c} R@10 / R@20" for c in cats)
        + " |",
        "|---|---|---:|---:|---:|" + "---:|" * len(cats),
    ]
    for name, entry in diag["by_candidate"].items():
        by = entry["by_category"]
        o = by["overall"]
        mark = " (best)" if name == diag["best"] else ""
        lines.append(
            f"| `{name}`{mark} | `{json.dumps(entry['overrides'])}` | {_fmt(o['recall@5'])} | "
            f"{_fmt(o['recall@10'])} | {_fmt(o['recall@20'])} | "
            + " | ".join(f"{_fmt(by[c]['recall@10'])} / {_fmt(by[c]['recall@20'])}" for c in cats)
            + " |"
        )
    lines += ["", f"Command: `{meta['command']}`", ""]
    return "\n".join(lines)
