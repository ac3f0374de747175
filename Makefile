# fiblab — common commands.  `make lab` starts JupyterLab from the project's virtual environment
# (created by scripts/setup.sh on first use) on 127.0.0.1, with ipywidgets 8 working out of the
# box (prebuilt extension: no build step).  PORT=8899 make lab picks another port; LAB_ARGS adds
# JupyterLab options (e.g. LAB_ARGS=--no-browser on a remote machine, then an SSH tunnel).

PORT ?= 8888
LAB_ARGS ?=
PY := .venv/bin/python
# JupyterLab refuses to run as root without --allow-root (containers, CI machines)
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: lab venv test test-notebooks strip-notebooks mutation

venv:
	bash scripts/setup.sh

lab: venv
	$(PY) -m jupyterlab --ip=127.0.0.1 --port=$(PORT) $(ALLOW_ROOT) \
		--ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks $(LAB_ARGS)

test: venv
	$(PY) -m pytest -q

# mutation score of the core modules (mutmut, minutes per group; not part of `make test`)
mutation: venv
	$(PY) scripts/mutation.py $(GROUPS)

test-notebooks: venv
	$(PY) -m pytest -q tests/fiblab/test_notebooks.py tests/fiblab/test_ui.py tests/fiblab/test_browser.py

# notebooks are committed without outputs (tests/fiblab/test_notebooks.py checks it)
strip-notebooks: venv
	$(PY) -m fiblab.ui.nbstrip notebooks/*.ipynb
