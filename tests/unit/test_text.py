"""engramdb.domain.text and engramdb.domain.agent_id: the shared word-level rules.

Each assertion pins a behaviour a caller relies on, including where the read-side and
write-side variants deliberately differ (unifying them would change extraction or retrieval).
"""

from __future__ import annotations

import pytest

from engramdb.domain import text
from engramdb.domain.agent_id import (
    AGENT_ID_PATTERN,
    check_agent_id,
)
from engramdb.domain.keys import match_key as keys_match_key


def test_match_key_strips_accents_case_and_spaces_and_is_the_keys_one() -> None:
    assert text.match_key("  José   DA  Silva ") == "jose da silva"
    assert text.match_key("Straße") == "strasse"
    assert keys_match_key is text.match_key


def test_fold_case_keeps_accents() -> None:
    assert text.fold_case("  José ") == "josé"
    assert text.fold_case("José") != text.fold_case("Jose")


def test_word_shapes_differ_on_apostrophes_and_hyphens() -> None:
    sample = "O'Brien's well-known café, 'quoted'"
    assert text.WORD_RE.findall(sample) == ["O", "Brien", "s", "well", "known", "café", "quoted"]
    assert text.CONTRACTED_WORD_RE.findall(sample) == ["O'Brien's", "well-known", "café", "quoted"]
    assert text.NAME_WORD_RE.findall(sample) == ["O'Brien's", "well-known", "café", "'quoted'"]


def test_ngram_spans_orders() -> None:
    assert list(text.ngram_spans(3, 2)) == [(0, 1), (1, 2), (2, 3), (0, 2), (1, 3)]
    assert list(text.ngram_spans(3, 5, longest_first=True)) == [
        (0, 3), (0, 2), (1, 3), (0, 1), (1, 2), (2, 3),
    ]
    assert list(text.ngram_spans(2, 4)) == [(0, 1), (1, 2), (0, 2)]
    assert list(text.ngram_spans(0, 4)) == []


@pytest.mark.parametrize(("chars", "tokens"), [(0, 0), (1, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_approx_tokens_rounds_up_quarter_length(chars: int, tokens: int) -> None:
    assert text.approx_tokens("x" * chars) == tokens


def test_stopword_lists_are_separate_vocabularies() -> None:
    assert {"the", "tell", "conte"} <= text.STOPWORDS_QUERY
    assert {"monday", "january", "você", "não"} <= text.STOPWORDS_EXTRACTION
    assert "monday" not in text.STOPWORDS_QUERY  # a weekday may be a keyword in a query
    assert "tell" not in text.STOPWORDS_EXTRACTION


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (["oi", "tudo", "bem"], True),
        (["thanks", "everyone"], True),
        (["bom", "dia", "pessoal"], True),
        (["there"], False),  # fillers alone are not small talk
        (["hi", "where", "is", "ana"], False),
        ([], False),
        (["hi"] * 9, False),  # too long to be small talk
    ],
)
def test_is_small_talk_query(tokens: list[str], expected: bool) -> None:
    assert text.is_small_talk_query(tokens) is expected


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("Hello!", True),
        ("Olá, Maria", True),
        ("hi there my friend", True),
        ("hi there my dear friend", False),  # over four words: may hold a fact
        ("high hopes", False),
        ("Tudo bem", False),  # small talk for the planner, not a sentence greeting here
    ],
)
def test_is_greeting_sentence(sentence: str, expected: bool) -> None:
    assert text.is_greeting_sentence(sentence) is expected


def test_one_agent_id_rule_for_every_surface() -> None:
    import re

    for good in ("agent-1@team.example", "a", "A.b:c+d_e", "x" * 200):
        assert re.match(AGENT_ID_PATTERN, good)
        assert check_agent_id(good) == good
    for bad in ("", "   ", "has space", "-leading", "a\x00b", "x" * 201, None, 42):
        with pytest.raises(ValueError, match="agent_id .* is not valid: use letters, digits"):
            check_agent_id(bad)
