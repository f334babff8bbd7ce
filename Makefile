# Entry points for people and CI. Every target installs the pinned environment first if needed.
PY ?= .venv/bin/python
STACK ?= dev
VENV_STAMP := .venv/.installed

.PHONY: install tools preview up test typecheck lint-imports lint-workflows deadcode unit render validate plan package-schema

$(VENV_STAMP): requirements.txt pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -r requirements.txt
	.venv/bin/pip install -q --no-deps -e .
	touch $(VENV_STAMP)

install: $(VENV_STAMP)

preview: $(VENV_STAMP)
	bash scripts/pulumi-stack.sh preview $(STACK)

up: $(VENV_STAMP)
	bash scripts/pulumi-stack.sh up $(STACK)

validate: $(VENV_STAMP)
	.venv/bin/tessera validate stacks/Pulumi.*.yaml

plan: $(VENV_STAMP)
	.venv/bin/tessera plan stacks/Pulumi.$(STACK).yaml

render: $(VENV_STAMP)
	.venv/bin/tessera render stacks/Pulumi.$(STACK).yaml -o out/$(STACK)

# components/__main__.py (the package's plugin entry) is checked on its own: mypy allows one __main__ per run
typecheck: $(VENV_STAMP)
	$(PY) -m mypy __main__.py components/tessera_pulumi tessera node-agent/tessera_node node-agent/gpu-checks
	$(PY) -m mypy components/__main__.py

# the Pulumi package's typed inputs (components/tessera_pulumi/package/args/) and schema snapshot
# (components/schema.json), regenerated from the stack config model; tests fail while either is stale
package-schema: $(VENV_STAMP)
	$(PY) -m tessera_pulumi.package.codegen

# the one-way layers of docs/architecture.md: contracts in pyproject.toml [tool.importlinter]
lint-imports: $(VENV_STAMP)
	.venv/bin/lint-imports

unit: $(VENV_STAMP)
	$(PY) -m pytest

# actionlint (with shellcheck on every `run:` script) over .github/workflows, and shellcheck over the
# scripts the workflows run; both tools pinned in requirements.txt
lint-workflows: $(VENV_STAMP)
	.venv/bin/actionlint -shellcheck=.venv/bin/shellcheck -pyflakes= .github/workflows/*.yml
	.venv/bin/shellcheck scripts/render-diff.sh
	@echo "actionlint: $(words $(wildcard .github/workflows/*.yml)) workflow files ok"

# promtool (Debian's prometheus package) for the monitoring tests: installed when run as root, else one
# line says what to run; TESSERA_SKIP_PROMTOOL=1 skips it and those tests
tools:
	@if [ "$${TESSERA_SKIP_PROMTOOL:-0}" != 1 ]; then bash scripts/install-promtool.sh; fi

# unused functions, classes, methods and imports in production code (vulture; tests and benchmarks count as users)
deadcode: $(VENV_STAMP)
	$(PY) scripts/deadcode.py

test: tools typecheck lint-imports lint-workflows deadcode unit
