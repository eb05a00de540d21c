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
import subprocess
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


# `NAME=value command`: the variables a Procfile line sets for its one process.
_ASSIGNMENT = re.compile(r"^([A-Z_]+)=(\S+)\s+")


def _split_assignments(command: str) -> tuple[dict[str, str], str]:
    assigned = {}
    while match := _ASSIGNMENT.match(command):
        assigned[match.group(1)] = match.group(2)
        command = command[match.end() :]
    return assigned, command


def _assert_runs_the_product(command: str) -> None:
    _assigned, command = _split_assignments(command)
    words = shlex.split(command)
    if words[0] == "receipts":
        assert words[1] in SUBCOMMANDS, f"{command!r} runs no receipts subcommand"
    else:
        assert words[:1] == ["gunicorn"] and words[-1] == "wsgi:app", command


def test_procfile_runs_only_real_commands() -> None:
    """Every Procfile process is gunicorn on wsgi:app or a real `receipts` subcommand."""
    processes = _procfile()
    assert set(processes) == {"release", "web", "worker"}
    for command in processes.values():
        _assert_runs_the_product(command)


def _procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    entries = (line.split(":", 1) for line in lines if line)
    return {name: command.strip() for name, command in entries}


def _database_url_of(process: str, environ: dict[str, str]) -> str:
    """What DATABASE_URL a Procfile process sees, expanded by bash as Heroku runs it."""
    assigned, _command = _split_assignments(_procfile()[process])
    if "DATABASE_URL" not in assigned:
        return environ["DATABASE_URL"]
    result = subprocess.run(
        ["bash", "-c", f'printf %s "{assigned["DATABASE_URL"]}"'],
        env=environ, capture_output=True, text=True, check=True, timeout=10,
    )  # fmt: skip
    return result.stdout


def test_each_process_takes_its_own_database_url_and_release_the_owners() -> None:
    """web and worker connect as their own roles when RECEIPTS_WEB_DATABASE_URL and
    RECEIPTS_WORKER_DATABASE_URL are set (else DATABASE_URL); the release phase
    (migrations) always uses DATABASE_URL, the owner's; only variables the product
    reads are set."""
    known = _settings_the_product_reads()
    for _process, command in _procfile().items():
        assigned, _rest = _split_assignments(command)
        assert set(assigned) <= {"DATABASE_URL"}
        assert set(re.findall(r"[A-Z_]{4,}", " ".join(assigned.values()))) <= known
    owner = "postgresql://owner@db/receipts"
    every = {
        "DATABASE_URL": owner,
        "RECEIPTS_WEB_DATABASE_URL": "postgresql://web@db/receipts",
        "RECEIPTS_WORKER_DATABASE_URL": "postgresql://worker@db/receipts",
    }
    assert _database_url_of("web", every) == "postgresql://web@db/receipts"
    assert _database_url_of("worker", every) == "postgresql://worker@db/receipts"
    assert _database_url_of("release", every) == owner
    for process in ("web", "worker", "release"):
        assert _database_url_of(process, {"DATABASE_URL": owner}) == owner


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


# Heroku Postgres connection limits by plan (README, Capacity).
HEROKU_POSTGRES_CONNECTIONS = {"essential-0": 20, "essential-1": 20, "essential-2": 40,
                               "standard-0": 120}  # fmt: skip


def test_app_json_fits_its_database_plans_connections() -> None:
    """The README's worst case: each gunicorn worker holds its pool and one more, a
    worker process 4, the release phase and an operator 2; within the plan's limit."""
    manifest: dict[str, Any] = json.loads((ROOT / "app.json").read_text())
    [plan] = [a["plan"] for a in manifest["addons"] if a["plan"].startswith("heroku-postgresql")]
    limit = HEROKU_POSTGRES_CONNECTIONS[plan.split(":")[1]]
    pool = int(manifest["env"].get("RECEIPTS_POOL_MAX_SIZE", {}).get("value", 8))
    web, worker = (manifest["formation"][name]["quantity"] for name in ("web", "worker"))
    gunicorn_workers = 2  # gunicorn.conf.py, without WEB_CONCURRENCY
    worst = web * gunicorn_workers * (pool + 1) + worker * 4 + 2
    assert worst <= limit, f"{worst} connections at worst on {plan} ({limit})"


def test_every_render_service_has_what_doctor_checks() -> None:
    """Render's cron jobs have no shell, so `receipts doctor` runs as the web service
    (its shell) or as a one-off of either: each service gets every setting a deploy
    needs, the shared ones from one environment group."""
    blueprint: dict[str, Any] = yaml.safe_load((ROOT / "render.yaml").read_text())
    groups = {group["name"]: group["envVars"] for group in blueprint.get("envVarGroups", [])}
    needed = {"DATABASE_URL", "STRIPE_WEBHOOK_SECRET", "EMAIL_FROM", "RESEND_API_KEY"}
    for service in blueprint["services"]:
        names = set()
        for variable in service["envVars"]:
            if "fromGroup" in variable:
                names |= {entry["key"] for entry in groups[variable["fromGroup"]]}
            else:
                names.add(variable["key"])
        assert needed <= names, f"{service['name']} lacks {sorted(needed - names)}"


def test_render_blueprint_uses_only_documented_fields_and_real_commands() -> None:
    """render.yaml: Render's documented fields, a one-minute cron, commands that exist."""
    blueprint: dict[str, Any] = yaml.safe_load((ROOT / "render.yaml").read_text())
    assert set(blueprint) <= BLUEPRINT_FIELDS
    databases = {database["name"] for database in blueprint["databases"]}
    for database in blueprint["databases"]:
        assert set(database) <= BLUEPRINT_DATABASE_FIELDS
    known = _settings_the_product_reads()
    groups = {group["name"]: group["envVars"] for group in blueprint.get("envVarGroups", [])}
    for service in blueprint["services"]:
        assert service["type"] in BLUEPRINT_SERVICE_TYPES
        assert set(service) <= BLUEPRINT_SERVICE_FIELDS
        for key in ("startCommand", "preDeployCommand"):
            if key in service:
                _assert_runs_the_product(service[key].replace("$PORT", "8000"))
        for variable in service["envVars"]:
            if "fromGroup" in variable:
                assert set(variable) == {"fromGroup"} and variable["fromGroup"] in groups
                continue
            assert variable["key"] in known
            sources = set(variable) - {"key"}
            assert len(sources) == 1 and sources <= BLUEPRINT_ENV_SOURCES, variable
            if "fromDatabase" in variable:
                assert variable["fromDatabase"]["name"] in databases
    for entries in groups.values():
        for variable in entries:
            assert variable["key"] in known
            sources = set(variable) - {"key"}
            # a group holds values, generated ones and ones asked for; no database link
            assert len(sources) == 1 and sources <= {"value", "generateValue", "sync"}, variable
    crons = [service for service in blueprint["services"] if service["type"] == "cron"]
    assert [cron["schedule"] for cron in crons] == ["* * * * *"]
