"""``?metadata=<JSON>`` on the HTTP lists (``/facts``, ``/messages``, ``/entities``; issue 24).

Why a JSON query parameter: the filter is a tree (``{"AND": [{"channel": "slack"}, {"tier":
{"in": ["gold", "silver"]}}]}``, ``management/metadata_filter.py``) that no flat query string
can spell; the same tree the Python ``list_facts(metadata=...)``, the Mem0 routes' ``filters``
and the retrieve body's ``within.metadata`` take. A value that is not JSON, not an object, or
not a valid tree is a 422 naming ``metadata``, before any query runs.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import Field

from engramdb.services.management.metadata_filter import MetadataFilter
from engramdb.services.management.models import FactFilter, MessageFilter, PageParams

METADATA_DESCRIPTION = (
    "a JSON filter on the turns' metadata (a fact's: its source turns'; an entity's: its active "
    'facts\'), decided in SQL: {"channel": "slack"}, {"tier": {"in": ["gold", "silver"]}}, '
    '{"OR": [...]}; operators eq, ne, in, nin, contains, icontains; AND / OR / NOT'
)


class _Metadata:
    metadata: str | None = Field(default=None, max_length=16_384, description=METADATA_DESCRIPTION)


class FactQuery(FactFilter, _Metadata):
    """``FactFilter`` plus ``metadata``."""


class MessageQuery(MessageFilter, _Metadata):
    """``MessageFilter`` plus ``metadata``."""


class EntityQuery(PageParams, _Metadata):
    """A page of entities plus ``metadata``."""


def parse_filter(raw: str) -> dict[str, Any]:
    """The filter tree a JSON text spells; ``ValueError`` saying why when it is not JSON, not
    an object, nested past the decoder's recursion, or not a valid tree."""
    try:
        tree = json.loads(raw)
    except RecursionError:  # [[[[… deeper than the decoder recurses
        raise ValueError("nested too deeply") from None
    if not isinstance(tree, dict):
        raise ValueError("a filter is a JSON object")
    MetadataFilter(tree)  # JSONDecodeError above and a bad tree here are ValueErrors
    return tree


def split(query: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The query's other fields, and its metadata filter tree (``None`` without one); a bad
    filter is the 422 FastAPI gives for a bad query parameter."""
    fields = query.model_dump(exclude={"metadata"})
    if query.metadata is None:
        return fields, None
    try:
        return fields, parse_filter(query.metadata)
    except ValueError as exc:
        raise RequestValidationError(
            [{"loc": ("query", "metadata"), "msg": f"metadata: {exc}", "type": "value_error"}]
        ) from None
