"""How every peerlog process logs: one format, so the worker's, the API's and its children's lines read alike.

Outside the import layers, like services/config.py: the CLI and the API's child processes both use it.
"""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure() -> None:
    logging.basicConfig(level=logging.INFO, format=FORMAT)
