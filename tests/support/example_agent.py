"""examples/agent.py as a module (it is a script, not part of a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PATH = Path(__file__).parents[2] / "examples" / "agent.py"


def load_agent_example() -> ModuleType:
    if "agent_example" not in sys.modules:
        spec = importlib.util.spec_from_file_location("agent_example", PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules["agent_example"] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["agent_example"]
