"""A projector on a thread of the test process, stopped and started again at will."""

from __future__ import annotations

import threading

from projections.projector import Projector
from services.settings import Settings


class RunningProjector:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.projector: Projector | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.projector = Projector(self.settings)
        self.thread = threading.Thread(target=self.projector.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.projector is not None:
            self.projector.stop()
            self.thread.join(30)
            self.projector.engine.dispose()
            self.projector = None
