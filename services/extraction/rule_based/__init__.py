"""LOW-QUALITY offline fallback extractor: regexes for English and Portuguese, no LLM.

Why it exists: engramdb must start and remember *something* with no API key and no
network (tests, demos, air-gapped use). It is **not** a substitute for the LLM extractor:
it keeps whole sentences (or clauses) as facts, recognises only a handful of attribute and
relationship phrasings, guesses entity types from prepositions, and misses anything
implicit. Services print :data:`OFFLINE_NOTICE` when they fall back to it, and every fact it
produces carries ``extractor="rule-based"`` as provenance so it can be re-extracted later
with an LLM.

What it does, per sentence (deterministic: same input ⇒ same output):

* a request to forget ("Forget that I like sushi", "Esquece que eu gosto de futebol") is
  a ``RETRACT`` of the fact it names — never a stored fact (:mod:`.speech_acts`);
* a compound sentence ("I live in Lisbon and work at Acme") is split into clauses, one
  fact per attribute, so a later move replaces only the city (:mod:`.clauses`); the rest
  below applies per clause;
* a self-introduction ("Eu sou o João") by that speaker yields nothing (no "João é o
  João"); by an unnamed speaker it is kept verbatim as the speaker's ``name``;
* skips questions, greetings/thanks and utterances under three words;
* first person (I/my/me…, eu/meu/minha/moro/trabalho…) → the speaker's self entity (the
  speaker's name, else ``"user"``); capitalised words → entities (a small EN+PT stopword
  list keeps sentence-initial common words out);
* single-valued attributes: ``residence`` (lives in / moved to / moro em / mudei para),
  ``workplace`` (works at / trabalho na), ``job_title`` (I'm a teacher / sou professor),
  ``relationship_status``, ``age``; a known fact of the same entity and attribute turns the
  statement into an ``UPDATE`` of it, and a negation (I no longer live in / não moro mais)
  into a ``RETRACT`` — only when such a known fact exists; a negation followed by the new
  value ("I no longer work at X, I now work at Y") is one ``UPDATE`` (:mod:`.negations`);
* relationships: "my wife Ana", "minha irmã Ana", "Ana is my sister" → self → Ana;
* every remaining first-person or entity-mentioning sentence becomes a fact whose text is
  the sentence, with a simple leading "I …"/"Eu …" rewritten to the speaker's name.

The package splits it by job — :mod:`.lexicon` (word lists), :mod:`.patterns` (regexes),
:mod:`.grammar` (string rules: names, job titles, first-person rewriting), :mod:`.names`
(who a sentence names), :mod:`.clauses`, :mod:`.speech_acts`, :mod:`.negations`,
:mod:`.known` (look-ups in what memory already knows) and :mod:`.extractor` (the
per-sentence decisions, :class:`RuleBasedExtractor`). This module only re-exports the public names, so
``engramdb.services.extraction.rule_based`` keeps its API.
"""

from engramdb.services.extraction.rule_based.extractor import (
    OFFLINE_NOTICE,
    RULES_VERSION,
    SELF_FALLBACK,
    RuleBasedExtractor,
)

__all__ = ["OFFLINE_NOTICE", "RULES_VERSION", "SELF_FALLBACK", "RuleBasedExtractor"]
