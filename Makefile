# Entry points for people and CI. `make install` once, then `make up STACK=dev` or `make test`.
PY ?= .venv/bin/python
STACK ?= dev

.PHONY: install up preview test typecheck render

install:
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -r requirements.txt
	.venv/bin/pip install -q --no-deps -e .

preview:
	bash scripts/pulumi-stack.sh preview $(STACK)

up:
	bash scripts/pulumi-stack.sh up $(STACK)

typecheck:
	$(PY) -m mypy components tessera node-agent/tessera_node

test: typecheck
	$(PY) -m pytest

render:
	$(PY) -m tessera.cli.main render stacks/Pulumi.$(STACK).yaml -o out/$(STACK)
