"""The deploy files a platform reads (Procfile, requirements, app.json, render.yaml) hold together.

Each file is checked against the fields its platform documents (Heroku's
app.json schema, Render's Blueprint reference) and against the product: every
command they run is a real `receipts` subcommand, every variable is one the
product reads, and the pinned versions satisfy pyproject.toml.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from receipts.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[2]

# Heroku's app.json schema: the top-level fields and those of an env entry.
APP_JSON_FIELDS = {
    "name", "description", "keywords", "website", "repository", "logo", "success_url",
    "scripts", "env", "formation", "image", "addons", "buildpacks", "environments", "stack",
}  # fmt: skip
APP_JSON_ENV_FIELDS = {"description", "value", "required", "generator"}
# Render's Blueprint reference: root fields, service types, env var sources.
BLUEPRINT_FIELDS = {"services", "databases", "envVarGroups", "projects", "ungrouped", "previews"}
BLUEPRINT_SERVICE_TYPES = {"web", "worker", "pserv", "cron", "keyvalue", "redis"}
BLUEPRINT_SERVICE_FIELDS = {
    "type", "name", "runtime", "plan", "region", "branch", "rootDir", "buildCommand",
    "startCommand", "preDeployCommand", "schedule", "healthCheckPath", "envVars",
    "autoDeploy", "numInstances", "scaling", "disk", "domains", "buildFilter",
}  # fmt: skip
BLUEPRINT_ENV_SOURCES = {
    "value", "generateValue", "sync", "fromDatabase", "fromService", "fromGroup",
}  # fmt: skip
BLUEPRINT_DATABASE_FIELDS = {
    "name", "plan", "databaseName", "user", "region", "postgresMajorVersion",
    "ipAllowList", "readReplicas", "highAvailability", "diskSizeGB",
}  # fmt: skip


def _settings_the_product_reads() -> set[str]:
    source = (ROOT / "receipts" / "config.py").read_text()
    return set(re.findall(r'"((?:RECEIPTS|STRIPE|RESEND|DATABASE|EMAIL)_[A-Z_]+)"', source))


def _assert_runs_the_product(command: str) -> None:
    words = shlex.split(command)
    if words[0] == "receipts":
        assert words[1] in SUBCOMMANDS, f"{command!r} runs no receipts subcommand"
    else:
        assert words[:1] == ["gunicorn"] and words[-1] == "wsgi:app", command


def test_procfile_runs_only_real_commands() -> None:
    """Every Procfile process is gunicorn on wsgi:app or a real `receipts` subcommand."""
    processes = dict(
        line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line
    )
    assert set(processes) == {"release", "web", "worker"}
    for command in processes.values():
        _assert_runs_the_product(command.strip())


def test_pinned_versions_satisfy_pyproject() -> None:
    """constraints.txt pins every dependency of pyproject.toml exactly, inside its range."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    for dependency in project["dependencies"]:
        requirement = Requirement(dependency)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is in pyproject.toml but not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} {requirement}"
    assert (ROOT / "requirements.txt").read_text().split("\n")[-3:-1] == ["-c constraints.txt", "."]


def test_app_json_uses_only_documented_fields_and_real_settings() -> None:
    """app.json: Heroku's documented fields, the Procfile's process types, our variables."""
    manifest: dict[str, Any] = json.loads((ROOT / "app.json").read_text())
    assert set(manifest) <= APP_JSON_FIELDS
    known = _settings_the_product_reads()
    for variable, entry in manifest["env"].items():
        assert variable in known, f"app.json sets {variable}, which the product never reads"
        assert set(entry) <= APP_JSON_ENV_FIELDS
        assert entry.get("generator", "secret") == "secret"
    procfile = (ROOT / "Procfile").read_text()
    for process in manifest["formation"]:
        assert f"{process}:" in procfile
    for addon in manifest["addons"]:
        assert isinstance(addon, str) or set(addon) <= {"plan", "as", "options"}


def test_render_blueprint_uses_only_documented_fields_and_real_commands() -> None:
    """render.yaml: Render's documented fields, a one-minute cron, commands that exist."""
    blueprint: dict[str, Any] = yaml.safe_load((ROOT / "render.yaml").read_text())
    assert set(blueprint) <= BLUEPRINT_FIELDS
    databases = {database["name"] for database in blueprint["databases"]}
    for database in blueprint["databases"]:
        assert set(database) <= BLUEPRINT_DATABASE_FIELDS
    known = _settings_the_product_reads()
    for service in blueprint["services"]:
        assert service["type"] in BLUEPRINT_SERVICE_TYPES
        assert set(service) <= BLUEPRINT_SERVICE_FIELDS
        for key in ("startCommand", "preDeployCommand"):
            if key in service:
                _assert_runs_the_product(service[key].replace("$PORT", "8000"))
        for variable in service["envVars"]:
            assert variable["key"] in known
            sources = set(variable) - {"key"}
            assert len(sources) == 1 and sources <= BLUEPRINT_ENV_SOURCES, variable
            if "fromDatabase" in variable:
                assert variable["fromDatabase"]["name"] in databases
    crons = [service for service in blueprint["services"] if service["type"] == "cron"]
    assert [cron["schedule"] for cron in crons] == ["* * * * *"]
