"""The CLI's help and start-up as a newcomer meets them (issue 27, ADR-0050): flags shown as
flags, plain text instead of reST, help on every option, ``serve --host/--port``, and a
misspelled ``ENGRAMDB_*`` variable named with the closest real one."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from engramdb.infra.settings_check import unknown_variables
from engramdb.services.entrypoints.cli import polish
from engramdb.services.entrypoints.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
COMMAND = polish.build(app)


def _walk(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command; Typer vendors its own click, so groups are known by ``commands``."""
    found = [(path, command)]
    for name, sub in (getattr(command, "commands", None) or {}).items():
        found += _walk(sub, (*path, name))
    return found


def _help(*args: str) -> str:
    result = CliRunner().invoke(COMMAND, [*args, "--help"], prog_name="engramdb", terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_option_has_help_and_no_rst() -> None:
    for path, command in _walk(COMMAND):
        for param in command.params:
            if getattr(param, "param_type_name", "") == "option" and param.name != "help":
                assert param.help, f"engramdb {' '.join(path)} {param.opts[0]} has no help"
        assert "``" not in (command.help or ""), path


def test_flags_take_no_value_in_help() -> None:
    for path, command in _walk(COMMAND):
        if getattr(command, "commands", None):
            continue
        text = _help(*path)
        assert "<bool>" not in text, path
        assert "``" not in text, path
    retrieve = _help("retrieve")
    json_line = next(line for line in retrieve.splitlines() if "--json" in line)
    assert json_line.split("--json", 1)[1].split() == ["print", "one", "JSON", "document", "│"]


def test_serve_has_host_and_port() -> None:
    text = _help("serve")
    assert "--host" in text and "--port" in text


def test_misspelled_setting_is_named_with_the_right_one() -> None:
    lines = unknown_variables({"ENGRAMDB_DATABSE_URL": "postgresql://x", "ENGRAMDB_HTTP_PORT": "1",
                               "ENGRAMDB_ZZZ": "1", "PATH": "/bin"})
    assert lines == [
        "warning: ENGRAMDB_DATABSE_URL is not an engramdb setting (did you mean "
        "ENGRAMDB_DATABASE_URL?); it is ignored",
        "warning: ENGRAMDB_ZZZ is not an engramdb setting; it is ignored",
    ]


def test_harness_knobs_draw_no_warning() -> None:
    """CI exports ENGRAMDB_TEST_* to every command; a warning there broke 15 tests' stderr."""
    assert unknown_variables({"ENGRAMDB_TEST_REQUIRE_BROWSER": "1", "ENGRAMDB_BENCH_X": "1"}) == []


def test_every_variable_the_repository_reads_is_known() -> None:
    """A name read with os.environ/getenv anywhere (code, tests, bench, CI) must not warn."""
    read = re.compile(r"""(?:environ(?:\.get)?[\[(]|getenv\(|export )['"]?(ENGRAMDB_[A-Z0-9_]+)""")
    names: set[str] = set()
    for folder in ("domain", "projections", "services", "infra", "tests", "bench", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and (path.suffix == ".py" or path.parent.name == ".ci"):
                names.update(read.findall(path.read_text(encoding="utf-8")))
    assert names, "the scan found nothing: its pattern is broken"
    assert unknown_variables(dict.fromkeys(names, "1")) == []


def test_the_warning_reaches_stderr_of_a_real_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")}
    env.update(ENGRAMDB_DATA_DIR=str(tmp_path), ENGRAMDB_NATS_URLL="nats://x", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "jobs", "list"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "did you mean ENGRAMDB_NATS_URL?" in done.stderr and "did you mean" not in done.stdout


def test_no_colour_codes_off_a_terminal() -> None:
    """FastStream colours its level names always; off a terminal it must not."""
    from faststream._internal.logger.formatter import ColourizedFormatter

    assert not polish.colour_allowed()  # pytest captures: not a terminal
    polish.plain_logs()
    formatter = ColourizedFormatter(fmt="%(levelname)s %(message)s", use_colors=True)
    record = logging.LogRecord("faststream", logging.WARNING, __file__, 1, "hi", None, None)
    assert formatter.format(record) == "WARNING hi"


def test_bench_locomo_says_where_it_runs_and_where_the_data_is(tmp_path: Path) -> None:
    """It looked for ``bench/locomo.py``, gone with the house layout: even inside the checkout
    it answered "runs from a source checkout". Missing data now says where to get it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "bench", "locomo"]
    inside = subprocess.run([*cli, "--data", str(tmp_path / "none.json")], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert inside.returncode == 2, inside.stderr
    assert inside.stderr.startswith("error: LoCoMo data not found") and "snap-research/locomo" in inside.stderr
    outside = subprocess.run(cli, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert outside.returncode == 2
    assert outside.stderr.startswith("error: engramdb bench locomo runs from a source checkout")
