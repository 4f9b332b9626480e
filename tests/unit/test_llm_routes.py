"""Per-operation LLM settings (ADR-0052): fallback to the global ``ENGRAMDB_LLM_*``, keys that
stay with their endpoint, one provider per distinct endpoint, and clear start-up errors."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from engramdb.infra.llm_routes import OPERATIONS, endpoint_host, resolve_routes
from engramdb.infra.providers.factory import make_operation_llms
from engramdb.infra.providers.operations import OperationLLMs
from engramdb.infra.providers.scripted import ScriptedLLM
from engramdb.infra.settings import Settings
from engramdb.infra.settings_check import known_variables, unknown_variables
from engramdb.services.entrypoints.cli.status import format_llm_operations


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("ENGRAMDB_LLM_"):
            monkeypatch.delenv(name)


def settings(**kw: Any) -> Settings:
    return Settings(**kw)


def test_nothing_set_means_no_llm_for_any_operation() -> None:
    routes = resolve_routes(settings())
    assert routes == {op: None for op in OPERATIONS}
    assert make_operation_llms(settings()).distinct() == 0


def test_global_settings_only_give_one_shared_provider() -> None:
    s = settings(llm_api_key="k", llm_model="m", llm_timeout_sec=12)
    routes = resolve_routes(s)
    assert {r.pool_key for r in routes.values() if r} == {(None, "k", "m", 12.0, 3)}
    assert all(r is not None and r.own == () for r in routes.values())
    llms = make_operation_llms(s)
    assert llms.distinct() == 1
    assert {p.name for p in llms.providers.values() if p} == {"openai:m"}


def test_each_part_falls_back_on_its_own() -> None:
    s = settings(llm_api_key="k", llm_base_url="http://gpu:8000/v1", llm_model="m",
                 llm_rerank_model="big", llm_profiles_timeout_sec=90)
    routes = resolve_routes(s)
    rerank, profiles = routes["rerank"], routes["profiles"]
    assert rerank is not None and profiles is not None
    assert (rerank.model, rerank.base_url, rerank.api_key) == ("big", "http://gpu:8000/v1", "k")
    assert rerank.own == ("model",)
    assert (profiles.model, profiles.timeout_sec) == ("m", 90.0)
    llms = make_operation_llms(s)
    assert llms.distinct() == 3  # the global one, rerank's model, profiles' timeout
    assert llms.get("extraction") is llms.get("resolution") is llms.get("consolidation")
    assert llms.timeout_sec("profiles", 1.0) == 90.0
    assert llms.timeout_sec("rerank", 1.0) == 30.0  # the route's (global) timeout


def test_a_key_stays_with_its_endpoint() -> None:
    # another base URL: the global key is not sent there
    other = resolve_routes(settings(llm_api_key="sk-global", llm_rerank_base_url="http://local:1/v1"))
    assert other["rerank"] is not None and other["rerank"].api_key is None
    assert other["extraction"] is not None and other["extraction"].api_key == "sk-global"
    # the same base URL: it is the same endpoint, so its key
    same = resolve_routes(settings(llm_api_key="k", llm_base_url="http://gpu/v1",
                                   llm_rerank_base_url="http://gpu/v1", llm_rerank_model="x"))
    assert same["rerank"] is not None and same["rerank"].api_key == "k"
    # its own key wins
    own = resolve_routes(settings(llm_api_key="k", llm_rerank_api_key="k2"))
    assert own["rerank"] is not None and own["rerank"].api_key == "k2"
    # only one operation configured: the others stay offline
    alone = resolve_routes(settings(llm_profiles_base_url="http://local:1/v1"))
    assert [op for op, r in alone.items() if r is not None] == ["profiles"]


def test_a_setting_that_cannot_take_effect_is_an_error_naming_it() -> None:
    with pytest.raises(ValidationError) as err:
        settings(llm_rerank_model="big", llm_rerank_timeout_sec=5)
    text = str(err.value)
    assert "ENGRAMDB_LLM_RERANK_MODEL, ENGRAMDB_LLM_RERANK_TIMEOUT_SEC set, but rerank has no " \
        "LLM endpoint" in text
    assert "ENGRAMDB_LLM_RERANK_BASE_URL" in text


def test_a_base_url_must_be_http_and_errors_never_show_a_key() -> None:
    with pytest.raises(ValidationError) as err:
        settings(llm_api_key="sk-very-secret", llm_extraction_base_url="localhost:8000/v1")
    text = str(err.value)
    assert "ENGRAMDB_LLM_EXTRACTION_BASE_URL must be an http(s) URL" in text
    assert "sk-very-secret" not in text


def test_empty_values_are_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAMDB_LLM_RERANK_MODEL", "")
    monkeypatch.setenv("ENGRAMDB_LLM_RERANK_BASE_URL", " ")
    assert resolve_routes(Settings())["rerank"] is None  # no error: nothing is set


def test_environment_names_are_known_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    known = known_variables()
    for op in OPERATIONS:
        for part in ("MODEL", "BASE_URL", "API_KEY", "TIMEOUT_SEC"):
            assert f"ENGRAMDB_LLM_{op.upper()}_{part}" in known
    monkeypatch.setenv("ENGRAMDB_LLM_API_KEY", "k")
    monkeypatch.setenv("ENGRAMDB_LLM_EXTRACTION_MODEL", "small")
    route = resolve_routes(Settings())["extraction"]
    assert route is not None and route.model == "small"
    [line] = unknown_variables({"ENGRAMDB_LLM_RECONCILIATION_MODEL": "x"})
    assert "reconciliation makes no LLM call" in line and "ENGRAMDB_LLM_EXTRACTION_*" in line


def test_endpoint_host_is_host_and_port_only() -> None:
    assert endpoint_host(None) == "api.openai.com"
    assert endpoint_host("https://u:p@api.example.com/v1?k=1") == "api.example.com"
    assert endpoint_host("http://127.0.0.1:8089/v1") == "127.0.0.1:8089"


def test_explicit_providers_and_overrides() -> None:
    a, b = ScriptedLLM({}, name="a"), ScriptedLLM({}, name="b")
    llms = OperationLLMs.same(a).with_overrides({"rerank": b})
    assert llms.get("extraction") is a and llms.get("rerank") is b and llms.distinct() == 2
    described = llms.describe()
    assert described["rerank"] == {"model": "b", "endpoint": None, "configured": "explicit"}
    wrapped = llms.wrapped(lambda p: ScriptedLLM({}, name=f"counted-{p.name}"))
    assert wrapped.get("extraction") is wrapped.get("profiles")  # shared stays shared
    assert wrapped.get("rerank") is not None and wrapped.get("rerank").name == "counted-b"
    with pytest.raises(ValueError, match="unknown LLM operation"):
        llms.with_overrides({"reconciliation": b})
    with pytest.raises(ValueError, match="unknown LLM operation"):
        llms.get("rerankk")


def test_status_lines() -> None:
    one = make_operation_llms(settings(llm_api_key="k", llm_model="m")).describe()
    assert format_llm_operations(one) == ["llm (every operation): openai:m @ api.openai.com  (global)"]
    split = make_operation_llms(settings(llm_api_key="k", llm_rerank_model="big")).describe()
    lines = format_llm_operations(split)
    assert len(lines) == len(OPERATIONS)
    assert "llm rerank: openai:big @ api.openai.com  (own: model)" in lines
    # the key is in no description and no route's repr
    secret = settings(llm_api_key="sk-unit-secret")
    assert "sk-unit-secret" not in repr(make_operation_llms(secret).describe())
    assert "sk-unit-secret" not in repr(resolve_routes(secret))
