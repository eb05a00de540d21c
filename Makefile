# Shortcuts for working on receipts. Every target uses the project's venv;
# `make venv` makes it. CONTRIBUTING.md says what each tier covers.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv check lint types contracts unit test db processes screenshots

venv:
	python3 -m venv $(VENV) && $(BIN)/pip install -e '.[lint]'

# The fast gate before a commit: linters, layer contracts, types, the unit tier.
check: lint contracts types unit

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

contracts:
	$(BIN)/lint-imports

types:
	$(BIN)/mypy

unit:
	$(BIN)/pytest -q tests/unit

db:
	$(BIN)/pytest -q tests/db

processes:
	$(BIN)/pytest -q tests/processes

# The README's test command: every tier of the default suite.
test:
	$(BIN)/pytest

# Receipts photographed in headless Chromium at 390 and 800 px, to look at
# before a template change lands (needs /usr/bin/chromium). SCREENSHOTS is
# outside the repository by default.
SCREENSHOTS ?= $(or $(TMPDIR),/tmp)/receipts-screenshots
screenshots:
	$(BIN)/python -m tests.screenshots $(SCREENSHOTS)
