# make run   — set up .venv, build site.db on first run, start app + Datasette + jobs (+ Caddy)
# make test  — the whole test suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test bench clean

# Under flock: a second make started at once waits for this install, then finds it done, instead
# of running pip over it.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit("Python 3.11 or newer is needed" if sys.version_info < (3, 11) else 0)'
	mkdir -p $(VENV)
	flock $(VENV)/.lock sh -ec '[ $@ -nt pyproject.toml ] && exit 0; \
		$(PYTHON) -m venv $(VENV); \
		$(PY) -m pip install --quiet --upgrade pip; \
		$(PY) -m pip install --quiet -e ".[test]"; \
		touch $@'

run: $(VENV)/.installed
	$(PY) -m siteapi.stack

test: $(VENV)/.installed
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) bench/run_all.py

# Keeps var/bot-signing-key.pem: sites that verify the lens's signed requests know it by its key id.
clean:
	rm -rf $(VENV) site.db site.db-* photos/public
	[ ! -d var ] || find var -mindepth 1 ! -name bot-signing-key.pem -delete
