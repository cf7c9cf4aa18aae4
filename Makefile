# ruleengine — the two commands a newcomer needs are `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test lint format bench dev-web clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install ruleengine with its dev tools

run: $(STAMP)  ## start everything on embedded defaults (Ctrl-C stops it)
	$(BIN)/ruleengine up $(ARGS)

# Test processes (pytest-xdist): one per core; each starts its own embedded servers.
# PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= auto

test: $(STAMP)  ## run the test suite against real embedded servers
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff check, ruff format --check, mypy --strict
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix src tests bench
	$(BIN)/ruff format src tests bench

bench: $(STAMP)  ## run every benchmark; each prints one JSON line last
	@for script in bench/*.py; do \
		case $$script in bench/_*) continue;; esac; \
		echo "== $$script"; $(BIN)/python $$script || exit 1; \
	done

dev-web: $(STAMP)  ## the web app under aiohttp-devtools with reload
	$(BIN)/adev runserver --port $${RULEENGINE_WEB_PORT:-8080} src/ruleengine/web/devapp.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
