"""Every RPC of every peerlog service, found from the generated protobuf descriptors."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, MethodDescriptor

import peerlog.v1 as api_package


@dataclass(frozen=True)
class Rpc:
    service: str  # e.g. peerlog.v1.MessageService
    method: str
    request: Descriptor
    response: Descriptor
    streaming: bool  # server streaming (no peerlog RPC streams requests)

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.method}"

    @property
    def name(self) -> str:
        return f"{self.service.rsplit('.', 1)[-1]}.{self.method}"

    def request_class(self):
        return message_factory.GetMessageClass(self.request)

    def response_class(self):
        return message_factory.GetMessageClass(self.response)


def _rpc(method: MethodDescriptor) -> Rpc:
    return Rpc(
        method.containing_service.full_name, method.name, method.input_type, method.output_type, method.server_streaming
    )


def all_rpcs() -> list[Rpc]:
    """Every method of every service in gen/peerlog/v1, in a stable order."""
    found: list[Rpc] = []
    for info in sorted(pkgutil.iter_modules(api_package.__path__), key=lambda m: m.name):
        if not info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(f"{api_package.__name__}.{info.name}")
        for service in module.DESCRIPTOR.services_by_name.values():
            found += [_rpc(m) for m in service.methods]
    assert not any(m.request.full_name == "" for m in found)
    return sorted(found, key=lambda r: r.path)
