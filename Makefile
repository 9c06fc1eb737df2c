# Conveniences around dev.py, which needs nothing but Python 3.11+.
PYTHON ?= python3

.PHONY: demo test setup
demo:
	$(PYTHON) dev.py demo
test:
	$(PYTHON) dev.py test
setup:
	$(PYTHON) dev.py setup
