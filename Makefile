PYTHON ?= python
# Reinstall when pyproject.toml changes or another Python is used.
STAMP := .make/installed-$(shell $(PYTHON) -c "import sys, hashlib; print(hashlib.sha1(sys.executable.encode()).hexdigest()[:12])")

# An editable install made from another checkout does not count: reinstall from this one.
INSTALLED_HERE := $(shell $(PYTHON) -I -c "import os, s2forecast; print(os.path.realpath(s2forecast.__file__).startswith(os.path.realpath('s2forecast') + os.sep))" 2>/dev/null)
ifneq ($(INSTALLED_HERE),True)
$(shell rm -f $(STAMP))
endif

.PHONY: install test demo bench lint

$(STAMP): pyproject.toml
	$(PYTHON) -m pip install -e ".[dev]"
	@# the help of fit/validate/test takes seconds of imports: render it once now (s2forecast/help_cache.py)
	-$(PYTHON) -m s2forecast.help_cache fit validate test
	@mkdir -p .make && touch $@

install: $(STAMP)

test: $(STAMP)
	$(PYTHON) -m pytest -q

# The main job on built-in data: shallow-water store, training, rollout, scoring (scripts/demo.py).
demo: $(STAMP)
	$(PYTHON) scripts/demo.py

bench: $(STAMP)
	$(PYTHON) scripts/bench_attention.py
	$(PYTHON) scripts/bench_data.py
	$(PYTHON) scripts/bench_train.py

lint: $(STAMP)
	$(PYTHON) -m ruff check . && $(PYTHON) -m ruff format --check .
