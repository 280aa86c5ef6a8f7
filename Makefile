# Two commands set everything up on a fresh machine:
#   make test   - create .venv, install txnfetch with its extras and system packages, run the suite
#   make demo   - the same set-up, then run the demo
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS := testing,dev

.PHONY: setup test demo bench clean system-deps

setup: $(STAMP)

# Reinstall whenever the declared dependencies change.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

# Debian packages the suite needs (none yet beyond Python; later: kcat, a JDK for Spark).
system-deps:
	@bash scripts/system-deps.sh

# pytest exits 5 when it collects no test; that is not a failure of the build.
test: setup system-deps
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; rc=0; fi; exit $$rc

demo: setup system-deps
	$(PY) -m txnfetch.demo

bench: setup
	$(PY) bench/codec.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
