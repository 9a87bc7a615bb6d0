"""Progress display for long CLI steps, without dependencies.

On a terminal a step is one line redrawn in place (a bar when the total is known, a spinner and the
elapsed time when not); in a log file or CI, where carriage returns make a mess, the same step prints
plain lines, at most one every ``log_every_s`` seconds, plus its start and its end.

Example::

    with Progress("fetching jars", total=12) as p:
        for jar in jars:
            fetch(jar)
            p.advance(detail=jar.name)

The formatting functions are pure (tested in tests/unit/test_progress.py); `Progress` only decides
when to write and where.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

__all__ = ["Progress", "bar", "format_duration", "render"]

SPINNER = "|/-\\"


def format_duration(seconds: float) -> str:
    """``"42 s"``, ``"3 min 05 s"``, ``"1 h 02 min"``: how long a step has run, for a human.

    >>> format_duration(4.2), format_duration(185), format_duration(3725)
    ('4 s', '3 min 05 s', '1 h 02 min')
    """
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def bar(done: float, total: float, width: int = 24) -> str:
    """A bar of ``width`` cells, filled in proportion ``done / total`` (clamped to 0..1).

    >>> bar(1, 4, width=8)
    '[##......]'
    >>> bar(9, 4, width=4)
    '[####]'
    """
    fraction = 0.0 if total <= 0 else min(1.0, max(0.0, done / total))
    filled = round(fraction * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def render(label: str, done: float, total: float | None, elapsed_s: float, *, detail: str = "", tick: int = 0) -> str:
    """One progress line: label, a bar and counts when ``total`` is known, else a spinner; then the time.

    >>> render("jars", 3, 12, 7.9, detail="kafka-clients.jar")
    'jars [######..................] 3/12 25% 7 s  kafka-clients.jar'
    >>> render("kafka", 0, None, 61, tick=1)
    'kafka / 1 min 01 s'
    >>> render("kafka", 0, None, 61, tick=-1)
    'kafka: 1 min 01 s'
    """
    if total is not None and total > 0:
        pct = int(100 * min(1.0, done / total))
        head = f"{label} {bar(done, total)} {_count(done)}/{_count(total)} {pct}%"
    elif tick < 0:  # no spinner (a log line): the label alone
        head = f"{label}:"
    else:
        head = f"{label} {SPINNER[tick % len(SPINNER)]}"
    line = f"{head} {format_duration(elapsed_s)}"
    return f"{line}  {detail}" if detail else line


def _count(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


class Progress:
    """One long step's progress on ``stream`` (stderr by default).

    Args:
        label: what the step does, e.g. ``"starting kafka"``.
        total: units of work when known (a bar is drawn), None for a spinner and the elapsed time.
        stream: where to write; a TTY gets a redrawn line, anything else plain lines.
        log_every_s: on a non-TTY, the least time between two progress lines.
        clock: seconds, monotonic (injected by tests).
    """

    def __init__(
        self,
        label: str,
        total: float | None = None,
        *,
        stream: TextIO | None = None,
        log_every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0.0
        self.detail = ""
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._log_every_s = log_every_s
        self._clock = clock
        self._started = clock()
        self._last_line = -float("inf")
        self._tick = 0
        self._width = 0
        # A ticker thread and the caller may both draw.
        self._lock = threading.RLock()
        self._stop_ticking: threading.Event | None = None

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    def __enter__(self) -> Progress:
        if not self._tty:
            self._write_line(f"{self.label} ...")
        else:
            self._draw()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish("failed" if exc_type is not None else "done")

    def note(self, text: str) -> None:
        """A permanent line (e.g. "kafka up in 1.2 s") above the redrawn one; always written."""
        with self._lock:
            if self._tty:
                self._stream.write("\r" + text.ljust(self._width) + "\n")
                self._draw()
            else:
                self._write_line(text)

    def tick_every(self, interval_s: float = 0.5) -> None:
        """Redraw from a background thread every ``interval_s`` (TTY only): the elapsed time moves
        while the caller blocks in one long call. Stopped by `finish`."""
        if not self._tty or self._stop_ticking is not None:
            return
        stop = self._stop_ticking = threading.Event()

        def run() -> None:
            while not stop.wait(interval_s):
                self.update()

        threading.Thread(target=run, name=f"progress-{self.label}", daemon=True).start()

    def advance(self, amount: float = 1.0, detail: str | None = None) -> None:
        """Count ``amount`` more units done (and show ``detail``, e.g. the current item)."""
        self.update(self.done + amount, detail)

    def update(self, done: float | None = None, detail: str | None = None) -> None:
        """Set the units done and/or the detail, and redraw (throttled on a non-TTY)."""
        with self._lock:
            if done is not None:
                self.done = done
            if detail is not None:
                self.detail = detail
            self._tick += 1
            if self._tty:
                self._draw()
            elif self._clock() - self._last_line >= self._log_every_s:
                self._write_line(self._line())

    def finish(self, outcome: str = "done") -> None:
        """The step's last line: its outcome and how long it took (always written)."""
        if self._stop_ticking is not None:
            self._stop_ticking.set()
        line = f"{self.label}: {outcome} in {format_duration(self.elapsed_s)}"
        if self.detail:
            line += f"  {self.detail}"
        with self._lock:
            if self._tty:
                self._stream.write("\r" + line.ljust(self._width) + "\n")
                self._stream.flush()
            else:
                self._write_line(line)

    def _line(self) -> str:
        # A spinner only where it spins: in a log each line stands alone.
        tick = self._tick if self._tty else -1
        return render(self.label, self.done, self.total, self.elapsed_s, detail=self.detail, tick=tick)

    def _draw(self) -> None:
        line = self._line()
        # Pad with spaces so a shorter line fully covers the previous one.
        self._stream.write("\r" + line.ljust(self._width))
        self._stream.flush()
        self._width = max(self._width, len(line))

    def _write_line(self, line: str) -> None:
        self._last_line = self._clock()
        self._stream.write(line + "\n")
        self._stream.flush()
