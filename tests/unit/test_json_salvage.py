"""A cut-off JSON answer keeps the items the model finished, and only those (ADR-0045)."""

from __future__ import annotations

import json

from engramdb.services.extraction.json_salvage import salvage_prefix

ANSWER = {
    "emotion": {"primary": "joy", "intensity": "high"},
    "directives": [],
    "facts": [
        {"text": "Melanie paints sunsets", "mentions": ["sunset"], "note": "a } and a ] in text"},
        {"text": 'Melanie has "two" kids', "mentions": []},
        {"text": "Melanie runs", "mentions": ["park"]},
    ],
}


def test_a_complete_answer_is_returned_as_it_is() -> None:
    assert salvage_prefix("```json\n" + json.dumps(ANSWER) + "\n```") == ANSWER


def test_every_cut_keeps_exactly_the_facts_finished_before_it() -> None:
    text = json.dumps(ANSWER, indent=2)
    ends = [text.index(json.dumps(f, indent=2).replace("\n", "\n    ")) for f in ANSWER["facts"]]
    for cut in range(len(text)):
        found = salvage_prefix(text[:cut])
        finished = [f for f, start in zip(ANSWER["facts"], ends, strict=True)
                    if start + len(json.dumps(f, indent=2).replace("\n", "\n    ")) <= cut]
        if found is None:
            assert not finished  # something finished is never thrown away
            continue
        assert found.get("facts", []) == finished  # never a half-written fact
        if "emotion" in found:
            assert found["emotion"] == ANSWER["emotion"]


def test_nothing_finished_is_none() -> None:
    assert salvage_prefix('{"facts": [{"text": "Melanie pai') is None
    assert salvage_prefix("not json at all") is None
    assert salvage_prefix("") is None
