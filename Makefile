# Every target creates or reuses the virtual environment in .venv; nothing is installed by hand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck docs run bench bench-profile clean openapi vendor screenshots

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check app tests bench clients/python
	$(BIN)/ruff format --check app tests bench clients/python
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck docs
	$(BIN)/pytest

# The documentation site (mkdocs.yml, docs/): --strict makes a dead link, an unknown anchor or a missing page an
# error, so `make test` fails on them. The site goes to build/docs/ (ignored by git).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

run: $(STAMP)
	$(BIN)/python -m app

# Benchmarks: forklog beside its baselines, one table (bench/README.md). The DSH rows need node and npm (else they
# say "skipped"); the append rows use wrk when it is installed, else a Python load generator.
bench: $(STAMP)
	$(BIN)/python -m bench

# Optional: profile the server on one scenario (SCENARIO=append1|append1-nofsync|batch100|fork|restart) with py-spy, which this
# installs into .venv on demand (a tool, not a dependency of the service).
bench-profile: $(STAMP)
	$(BIN)/pip install --quiet py-spy
	$(BIN)/python -m bench.profile $(or $(SCENARIO),append1)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

openapi: $(STAMP)
	$(BIN)/python -m app.api.docs.openapi_document

# The docs pages' browser files (Swagger UI, ReDoc), refreshed from vendor/package-lock.json with npm: a maintainer's
# step, not a build step (the files are committed in app/api/ui/vendor/).
vendor:
	bash vendor/refresh.sh

# The session browser's screenshots for the docs (docs/browser.md): the UI tests write them under pytest's temporary
# folder (build/, ignored by git), and only this target copies them into docs/screenshots/. In one process (-n 0):
# xdist's workers would each write into a folder of their own below --basetemp.
screenshots: $(STAMP)
	mkdir -p build
	$(BIN)/pytest tests/ui -q -p no:cacheprovider -n 0 --basetemp=build/ui-tests
	mkdir -p docs/screenshots
	cp build/ui-tests/screenshots/*.png docs/screenshots/
