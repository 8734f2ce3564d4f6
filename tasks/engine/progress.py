"""Progress bars that read well wherever they are written: a tqdm bar on a terminal, a plain line at intervals in
a log file or CI.

tqdm redraws its bar with carriage returns several times a second; on a terminal that is one line that moves, but
a log file or a CI log keeps every redraw (thousands per run). :func:`progress_bar` therefore returns a tqdm bar
only when its stream is a terminal (or a notebook), and otherwise a :class:`LineProgress` that writes one
readable line every ``interval`` seconds and one when it closes, e.g.::

    epoch 2/10: 120/400 step (30 %), 3.1 step/s, elapsed 0:39, ETA 1:30, loss=0.412
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

from tqdm import tqdm
from tqdm.auto import tqdm as auto_tqdm

INTERVAL = 30.0  # seconds between two lines in a log: a heartbeat, not a stream


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it",
                 disable: bool = False, file: IO[str] | None = None, interval: float = INTERVAL,
                 **tqdm_options: Any) -> tqdm | LineProgress:
    """A progress bar over ``iterable`` (or ``total`` steps counted with ``update``), used as tqdm is.

    On a terminal (``file``, default ``sys.stderr``, is a TTY) or in a notebook this is ``tqdm`` itself, given
    ``tqdm_options`` (``leave``, ``dynamic_ncols``, ...). Anywhere else it is a :class:`LineProgress`, which
    ignores those options: a log must not fill with the bar's carriage-return redraws.

    Args:
        iterable: what to iterate over (its ``len`` gives the total when it has one).
        total: the number of steps when ``iterable`` is None or has no length.
        desc: what is counted, at the start of each line (e.g. ``"epoch 2/10"``).
        unit: the unit of one step (``"it"``, ``"volume"``, ...).
        disable: no output at all (e.g. ``--quiet``, or a worker that is not the main process).
        file: the stream written to (default: ``sys.stderr`` at the time of the call).
        interval: seconds between two lines when the stream is not a terminal.
    """
    file = sys.stderr if file is None else file
    if disable or _in_notebook():
        return auto_tqdm(iterable, total=total, desc=desc, unit=unit, disable=disable, file=file, **tqdm_options)
    if _is_terminal(file):
        return tqdm(iterable, total=total, desc=desc, unit=unit, file=file, **tqdm_options)
    return LineProgress(iterable, total=total, desc=desc, unit=unit, file=file, interval=interval)


class LineProgress:
    """A progress report for a stream that is not a terminal: a line every ``interval`` seconds and one on close.

    It offers the part of tqdm's interface the package uses (iteration, ``update``, ``set_postfix``,
    ``set_postfix_str``, ``close``, ``with``), so that a caller never asks which of the two it holds. The lines
    carry no carriage return and no ANSI codes.
    """

    def __init__(self, iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", file: IO[str] | None = None, interval: float = INTERVAL) -> None:
        if interval <= 0:
            raise ValueError(f"interval={interval!r}: give the seconds between two progress lines (> 0)")
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.file = sys.stderr if file is None else file
        self.interval = interval
        self.n, self.postfix, self.closed = 0, "", False
        self.shown = 0  # the count the last line showed
        self.start = self.last = time.monotonic()

    def __iter__(self) -> Iterator:
        if self.iterable is None:
            raise TypeError("this progress bar counts steps given to update(); give an iterable to iterate over it")
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:  # exhausted, or left by break / an exception: the closing line reports where it stopped
            self.close()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more steps; write a line when ``interval`` seconds passed since the last one."""
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self._write(now)

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True, **values: Any) -> None:
        """Values shown at the end of the next line (as tqdm's ``set_postfix``, e.g. the loss)."""
        values = {**(ordered_dict or {}), **values}
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self.postfix = str(text)

    def close(self) -> None:
        """Write the closing line (how far it got, how fast), once; nothing when no step was counted since the
        last line."""
        if self.closed:
            return
        self.closed = True
        if self.n != self.shown:
            self._write(time.monotonic())

    def line(self, now: float) -> str:
        """The line for ``now``: what, how far, how fast, how long (and how long still to go), the postfix."""
        elapsed = now - self.start
        count = f"{self.n}/{self.total}" if self.total else f"{self.n}"
        if self.total:
            count += f" {self.unit} ({100 * self.n / self.total:.0f} %)"
        else:
            count += f" {self.unit}"
        parts = [count]
        if elapsed > 0 and self.n:
            rate = self.n / elapsed
            parts.append(f"{rate:.1f} {self.unit}/s" if rate >= 1 else f"{1 / rate:.1f} s/{self.unit}")
        parts.append(f"elapsed {tqdm.format_interval(elapsed)}")
        if self.total and self.n and self.n < self.total and not self.closed:
            parts.append(f"ETA {tqdm.format_interval(elapsed / self.n * (self.total - self.n))}")
        if self.postfix:
            parts.append(self.postfix)
        return f"{self.desc or 'progress'}: {', '.join(parts)}"

    def _write(self, now: float) -> None:
        self.shown = self.n
        self.file.write(self.line(now) + "\n")
        self.file.flush()


def _is_terminal(file: IO[str]) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel, where tqdm draws a widget instead of carriage returns."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})
