"""``engramdb_fold`` skips ``translate()`` for ASCII texts (ADR-0036): its values must be exactly
the previous body's for every input, or stored ``search_tsv``/``search_len`` would disagree with
the queries analysed by the new one."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from engramdb.projections.search import _ACCENTED, _PLAIN, FOLD_FUNCTION

PREVIOUS = ("CREATE FUNCTION fold_before(text) RETURNS text LANGUAGE sql IMMUTABLE STRICT"
            f" AS $$ SELECT translate(lower($1), '{_ACCENTED}', '{_PLAIN}') $$")

TEXTS = [
    "", " ", "plain ascii text", "MiXeD CaSe 123 !?", "line\nbreak\ttab", "\x01\x7f",
    "São Paulo", "VOCÊ", "naïve café", "ÀÉÎÕÜÇÑÝ", "mixed ascii and ü", "日本語", "emoji 🙂 ok",
    "Ærø ßtraße", "İstanbul", "ÿ Ÿ", _ACCENTED, _PLAIN.upper(),
]


def test_fold_equals_the_translate_body(pg_url: str, fresh_schema: Any) -> None:
    schema, _env = fresh_schema("fold")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))
        conn.execute(FOLD_FUNCTION)
        conn.execute(PREVIOUS)
        rows = conn.execute(
            "SELECT t, engramdb_fold(t), fold_before(t) FROM unnest(%s::text[]) t",
            ([*TEXTS, *(t + "É" for t in TEXTS)],)).fetchall()
        assert all(now == before for _, now, before in rows), [r for r in rows if r[1] != r[2]]
        assert conn.execute("SELECT engramdb_fold(NULL)").fetchone() == (None,)
        assert conn.execute("SELECT engramdb_fold('São Paulo')").fetchone() == ("sao paulo",)
