PYTHON ?= python
# Reinstall when pyproject.toml changes or another Python is used.
STAMP := .make/installed-$(shell $(PYTHON) -c "import sys, hashlib; print(hashlib.sha1(sys.executable.encode()).hexdigest()[:12])")

# An editable install made from another checkout does not count: reinstall from this one.
INSTALLED_HERE := $(shell $(PYTHON) -I -c "import os, s2forecast; print(os.path.realpath(s2forecast.__file__).startswith(os.path.realpath('s2forecast') + os.sep))" 2>/dev/null)
ifneq ($(INSTALLED_HERE),True)
$(shell rm -f $(STAMP))
endif

.PHONY: install test test-fast demo bench lint
.DEFAULT_GOAL := install

$(STAMP): pyproject.toml
	$(PYTHON) -m pip install -e ".[dev]"
	@mkdir -p .make && touch $@

# The help of fit/validate/test takes seconds of imports: render it once now (s2forecast/help_cache.py).
# Not on the way to test or demo, which never print it (11 s of a fresh clone's make test).
install: $(STAMP)
	-$(PYTHON) -m s2forecast.help_cache fit validate test

# pytest-xdist workers, one per core (at most 8); JOBS=0 runs the tests in this process (pdb, -s).
# The shared tiny stores and checkpoints are built once per run (tests/session_fixtures.py).
# Only the plugins the suite uses: others installed here (hypothesis', zarr's, ...) cost each worker
# 1.4 s of imports and could change how the tests run.
# --dist worksteal: an idle worker takes queued tests from a busy one, so a long test (the two-node DDP
# run, 44 s) queued late does not end the run alone (346 s against 365 s with the default scheduling,
# back to back from a fresh clone, 1741 tests; the suite has grown since: README's figures).
JOBS ?= logical
PYTEST := PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(PYTHON) -m pytest -p xdist.plugin -q -n $(JOBS) --maxprocesses 8 --dist worksteal

# Every test. PYTEST_ARGS adds options, e.g. make test PYTEST_ARGS="-x tests/data".
test: $(STAMP)
	$(PYTEST) $(PYTEST_ARGS)

# The edit loop: every layer (tests/geometry ... tests/commands) without the cases marked slow
# (DDP, kill -9 resumes, pipelines in subprocesses, gradchecks and kernel checks on bigger grids).
test-fast: $(STAMP)
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

# The main job on built-in data: shallow-water store, training, rollout, scoring (scripts/demo.py).
demo: $(STAMP)
	$(PYTHON) scripts/demo.py

bench: $(STAMP)
	$(PYTHON) scripts/bench_attention.py
	$(PYTHON) scripts/bench_data.py
	$(PYTHON) scripts/bench_train.py

lint: $(STAMP)
	$(PYTHON) -m ruff check . && $(PYTHON) -m ruff format --check .
