"""A batch's progress for the TA: done/total, rate and ETA."""
from __future__ import annotations

import sys
import time

from grader.report.printable import printable


class Progress:
    """done/total, rate and ETA on one line (a terminal) or one line per submission."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.stream, self.done, self.started = total, stream, 0, time.monotonic()
        self.live = hasattr(stream, "isatty") and stream.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate else 0
        width = 24
        filled = int(width * self.done / max(self.total, 1))
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{rate:.2f}/s ETA {eta:.0f} s  {printable(label, one_line=True)}")
        print(("\r" + line[:120].ljust(120)) if self.live else line, end="" if self.live else "\n",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self.live:
            print(file=self.stream, flush=True)
