"""Emotion of one message, as the extractor read it (issue 26).

Why here: the emotion rides on the one extraction answer (no second LLM call, unlike
arandu's separate detector) and is stored with the message record's ``Processed`` event, so
it is part of the extraction contract. ``detector`` says honestly who decided: ``llm`` (the
extraction call) or ``lexicon`` (the offline extractor's small EN + PT word list, which
knows far less); the LLM never fills it in (the extractor sets it after parsing).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

EmotionLabel = Literal["neutral", "joy", "sadness", "anger", "fear", "surprise", "disgust"]
Intensity = Literal["low", "medium", "high"]
EMOTIONS: tuple[str, ...] = ("neutral", "joy", "sadness", "anger", "fear", "surprise", "disgust")
#: intensity as a number for the read model (0..1); a label is easier for a small model
INTENSITY_VALUE: dict[str, float] = {"low": 0.3, "medium": 0.6, "high": 0.9}


class ExtractedEmotion(BaseModel):
    """The primary emotion the speaker expresses in the message and how strongly."""

    primary: EmotionLabel = "neutral"
    intensity: Intensity = "low"
    detector: Literal["llm", "lexicon"] = "llm"  # set by the extractor, never by the model

    @property
    def intensity_value(self) -> float:
        return INTENSITY_VALUE[self.intensity]
