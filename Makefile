# The README's two commands: `make run` and `make test`. Each sets up what it needs first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run demo-reset test install c2sp-peers lint browser-deps axe clean bench bench-quick bench-deps bench-scale chaos

$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -e clients/python
	touch $(STAMP)

install: $(STAMP)

# Independent C2SP peers for the audit log's interoperability tests: aics-tlog (a verifier of checkpoints,
# tiles and proofs) and aics-witness (a c2sp.org/tlog-witness). They need Python 3.12 or newer, so they get
# a virtual environment of their own; the project itself stays on 3.11.
C2SP_VENV := .venv-c2sp
C2SP_STAMP := $(C2SP_VENV)/.installed
PYTHON312 ?= $(shell for candidate in python3.13 python3.12 $$HOME/.pyenv/versions/3.13*/bin/python3 \
  $$HOME/.pyenv/versions/3.12*/bin/python3; do $$candidate -c 'import sys; assert sys.version_info >= (3, 12)' \
  >/dev/null 2>&1 && { echo $$candidate; break; }; done)
$(C2SP_STAMP): tests/c2sp-requirements.txt
	@test -n "$(PYTHON312)" || { echo "The C2SP peers need Python 3.12 or newer (python3.12 on PATH, or PYTHON312=...)."; exit 1; }
	$(PYTHON312) -m venv $(C2SP_VENV)
	$(C2SP_VENV)/bin/python -m pip install --quiet -r tests/c2sp-requirements.txt
	touch $(C2SP_STAMP)

c2sp-peers: $(C2SP_STAMP)

# Debian's Chromium drives the browser tests; Playwright never downloads a browser of its own.
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser tests"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# axe-core (the accessibility checker the browser tests run) from the npm registry, kept in the repository
# as tests/vendor/axe.min.js so the tests run offline; `make axe` fetches it again when it is missing.
AXE_VERSION := 4.14.1
AXE := tests/vendor/axe.min.js
$(AXE):
	mkdir -p tests/vendor .axe-npm
	npm install --prefix .axe-npm --no-save --no-audit --no-fund --silent axe-core@$(AXE_VERSION)
	cp .axe-npm/node_modules/axe-core/axe.min.js $(AXE)
	rm -rf .axe-npm

axe: $(AXE)

# The demo's values, asked for explicitly in .demo.env: the settings never fall back to them, and read the
# file only when the environment gives no SECRET_KEY. Every `manage.py` command run in this checkout then
# works on the demo as the README prints it, outside `make run` too. The audit log's signing key is generated
# once (.audit-signing-key, never printed) and kept, so that the tree heads signed in earlier runs still verify.
# The system checks run once, with runserver.
run: $(STAMP) .demo.env
	$(PY) manage.py migrate --noinput --skip-checks
	@$(PY) manage.py seed_demo --skip-checks > .demo-seed.log || { cat .demo-seed.log; echo "Seeding the demo failed; 'make demo-reset' starts over."; exit 1; }
	@cat .demo-seed.log
	@grep -q '^agt_' .demo-seed.log || { echo "No agent token was minted; see the lines above."; exit 1; }
	@echo
	@echo "  Approval gateway demo:  http://$(HOST):$(PORT)/"
	@echo "  Customers:  alice / alice-demo-pass    bob / bob-demo-pass"
	@echo "  Staff:      sam / sam-demo-pass (Refund reviewers, Invoice approvers)   bill / bill-demo-pass (Billing)"
	@echo "  Agent token for alice:  $$(tail -n 1 .demo-seed.log)"
	@echo "  Try:  curl -s -H \"Authorization: Bearer $$(tail -n 1 .demo-seed.log)\" http://$(HOST):$(PORT)/api/agent/tools"
	@echo
	$(PY) manage.py runserver $(HOST):$(PORT)

.audit-signing-key:
	@umask 077; $(PYTHON) -c "import base64, os; print(base64.b64encode(os.urandom(32)).decode())" > $@

# The demo shop's currencies each have a staff review threshold (its JPY order too), so that `manage.py check`
# has nothing to warn about in the demo; the environment's own STAFF_REVIEW_THRESHOLDS still wins.
DEMO_THRESHOLDS := EUR:10000,USD:10000,JPY:15000
.demo.env: .audit-signing-key $(lastword $(MAKEFILE_LIST))
	@umask 077; printf 'DEMO=1\nAUDIT_SIGNING_KEY=%s\nAUDIT_CHECKPOINT_FILE=%s\nSTAFF_REVIEW_THRESHOLDS=%s\n' \
	  "$$(cat .audit-signing-key)" "$(CURDIR)/.audit-checkpoints.jsonl" "$(DEMO_THRESHOLDS)" > $@

# Start the demo over: a new database, loaded afresh by the next `make run`.
demo-reset:
	rm -f db.sqlite3 .demo-seed.log .audit-checkpoints.jsonl

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: $(STAMP) $(C2SP_STAMP) browser-deps $(AXE)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	DJANGO_SETTINGS_MODULE=config.settings_test $(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/pytest

clean:
	rm -rf $(VENV) $(C2SP_VENV) db.sqlite3 .demo-seed.log staticfiles

# `make bench` (three full runs and their medians, 40 to 70 minutes) and `make bench-quick` (one quick run,
# about 4): the gateway's speed against floors measured in the same run (docs/benchmarks.md). PostgreSQL and Redis come from DATABASE_URL and
# REDIS_URL (the local ones by default); the run creates a database of its own and drops it after.
# It starts gunicorn (config/gunicorn.conf.py) twice (the gateway, and the bare floor), two Celery workers
# and the audit sealer, drives them with wrk, pgbench and the open-loop generator (bench/open_loop.py,
# the standard library's asyncio: nothing to install; vegeta and k6 are not in the registries here),
# prints a Markdown table and writes a JSON result to bench/results/.
bench-deps:
	@command -v wrk >/dev/null 2>&1 && command -v pgbench >/dev/null 2>&1 || { \
	  echo "Installing Debian's wrk and pgbench (in the postgresql package) for the benchmark"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq wrk postgresql >/dev/null; }

bench: $(STAMP) bench-deps
	$(PY) -m bench.runs

bench-quick: $(STAMP) bench-deps
	$(PY) -m bench.run --quick

# `make bench-scale` (6 to 25 minutes): each cost at growing sizes of data, on PostgreSQL: the audit log at 10
# thousand to 10 million leaves (written directly as its tiles), the shop at 10 thousand and 1 million rows
# (written with COPY). Databases of its own next to DATABASE_URL's, dropped after; a Markdown table, and the
# JSON in bench/results/scale-<time>.json (docs/benchmarks.md; `python -m bench.scale --help`).
bench-scale: $(STAMP)
	$(PY) -m bench.scale

# `make chaos` (about 15 minutes): the fault campaign (chaos/, docs/reliability.md) on a stack of its own: a
# throwaway PostgreSQL primary and synchronous standby (Debian's initdb, pg_ctl, pg_basebackup), Redis, gunicorn,
# a worker per queue, beat and the sealer, the Stripe-compatible test server behind a TCP fault proxy, an SMTP
# peer; every fault three times (the failover once). Prints the table; exits non-zero when an invariant fails.
# `make test` runs the short one (each fault once) on PostgreSQL machines: tests/chaos/test_campaign.py.
chaos: $(STAMP) bench-deps
	$(PY) -m chaos
