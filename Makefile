# Two entry points: `make demo` (set up + index the bundled samples + example searches)
# and `make test` (set up + lint + tests + wheel check). Both create ./.venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_ENV := CHROMADB_PERSIST_DIR=.tmp/demo/chroma_db BM25_PERSIST_DIR=.tmp/demo/bm25_index

.PHONY: setup demo test lint format wheel-check docs-check bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: setup
	$(DEMO_ENV) $(BIN)/rag index rag_app/data/samples
	$(DEMO_ENV) $(BIN)/rag search "りゅうおう"
	$(DEMO_ENV) $(BIN)/rag search "スライムの攻撃力"
	$(DEMO_ENV) $(BIN)/rag search "how do I run several coroutines at once?"
	$(DEMO_ENV) $(BIN)/rag search "ロトのつるぎ" --mode separate
	$(DEMO_ENV) $(BIN)/rag stats
	$(DEMO_ENV) $(BIN)/rag service stop

lint: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: lint
	$(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=30
	$(BIN)/python scripts/wheel_check.py

# Build the wheel, install it into a clean venv (offline) and use it outside the repository.
wheel-check: setup
	$(BIN)/python scripts/wheel_check.py

# The shell and Python blocks of README.md and docs/ checked against the code (in `make test` too).
docs-check: setup
	$(BIN)/python -m pytest -q tests/test_docs_snippets.py

bench: setup
	$(BIN)/python bench/search_latency.py

clean:
	rm -rf .tmp
