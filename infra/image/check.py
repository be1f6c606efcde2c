"""The image's last build step: what the services read at run time is there and loads offline.

Counts tokens (the cl100k_base ranks) and embeds a text with each local embedding model (weights and
tokenizers hash-checked), then prints what it found. It fails if any of that would need npm or a download.
"""

from __future__ import annotations

import shutil

from services.llm.embeddings import LOCAL_MODELS, LocalOnnxEmbedder
from services.llm.tokens import count_tokens, default_cache_dir


def main() -> None:
    if shutil.which("npm"):
        raise SystemExit("npm is on PATH: this check must prove the tokenizer does without it")
    tokens = count_tokens("peerlog keeps what agents learn")
    print(f"tokenizer: {tokens} tokens, ranks in {default_cache_dir()}")
    for name in LOCAL_MODELS:
        (vector,) = LocalOnnxEmbedder(model=name).embed_sync(["peerlog keeps what agents learn"])
        print(f"embedding model {name}: {len(vector)} dimensions")


if __name__ == "__main__":
    main()
