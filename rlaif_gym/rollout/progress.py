"""What a running collection shows: ticks done of planned, episodes, LLM calls/s, failures, an ETA.

Three modes. `"live"`: a rich progress bar on a terminal (the `[cli]` extra), redrawn as ticks
complete. `"lines"`: one plain line on stderr every `interval_s` seconds, for logs, CI and `make`,
where a redrawn bar would be noise or invisible; a final line when the run ends. `None`: nothing.
`"auto"` picks live on a terminal and lines elsewhere.

The planned tick count is an upper bound (every episode to its tick limit); it shrinks as episodes
end early (bankruptcy, a failed call), so the ETA, computed from the tick rate so far, is honest.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import IO, Any

__all__ = ["ProgressDisplay", "progress_mode"]

PROGRESS_MODES = ("auto", "live", "lines")


def progress_mode(progress: bool | str | None, stream: IO[str] | None = None) -> str | None:
    """Resolve `RolloutCollector(progress=...)`: True/"auto" -> "live" on a terminal, else "lines"."""
    if progress is None or progress is False:
        return None
    if progress is True:
        progress = "auto"
    if progress not in PROGRESS_MODES:
        raise ValueError(f"progress must be True, False or one of {PROGRESS_MODES}, got {progress!r}")
    if progress == "auto":
        stream = stream or sys.stderr
        return "live" if getattr(stream, "isatty", lambda: False)() else "lines"
    return progress


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ProgressDisplay:
    """Counts what a collection did and shows it (see the module docstring for the modes).

    Args:
        mode: "live", "lines" or None (see `progress_mode`).
        episodes: episodes this collection plays.
        planned_ticks: ticks it plays if no episode ends early.
        interval_s: seconds between two lines in "lines" mode.
        stream: where lines go (stderr by default).
    """

    def __init__(self, mode: str | None, episodes: int, planned_ticks: int, *, interval_s: float = 5.0,
                 stream: IO[str] | None = None) -> None:
        self.mode, self.total, self.planned = mode, episodes, planned_ticks
        self.interval_s = interval_s
        self.stream = stream or sys.stderr
        self.ticks = self.calls = self.episodes = self.failed = self.failed_calls = 0
        self.reward_sum = 0.0
        self._start = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None
        self._heartbeat: asyncio.Task | None = None
        self._last_refresh = 0.0

    # -- counting -----------------------------------------------------------------------------

    def tick(self, reward: float) -> None:
        """One tick played (with its one successful policy call)."""
        self.ticks += 1
        self.calls += 1
        self.reward_sum += reward
        if self._bar is not None and time.perf_counter() - self._last_refresh > 0.1:
            self._refresh_live()

    def call_failed(self) -> None:
        """A policy call failed for good (its episode ends failed)."""
        self.calls += 1
        self.failed_calls += 1

    def episode_done(self, failed: bool, unplayed_ticks: int = 0) -> None:
        """An episode finished; `unplayed_ticks` of the plan it will never play (it ended early)."""
        self.episodes += 1
        self.failed += bool(failed)
        self.planned = max(self.ticks, self.planned - max(0, unplayed_ticks))
        if self._bar is not None:
            self._refresh_live()

    # -- what is shown -------------------------------------------------------------------------

    def status(self) -> str:
        """One line: ticks done/planned, episodes, calls/s, failures, mean reward per tick, elapsed, ETA."""
        elapsed = time.perf_counter() - self._start
        rate = self.calls / elapsed if elapsed > 0 else 0.0
        tick_rate = self.ticks / elapsed if elapsed > 0 else 0.0
        left = max(0, self.planned - self.ticks)
        eta = _clock(left / tick_rate) if tick_rate > 0 else "?"
        pct = 100.0 * self.ticks / self.planned if self.planned else 100.0
        mean = self.reward_sum / self.ticks if self.ticks else 0.0
        return (f"ticks {self.ticks}/{self.planned} ({pct:.0f}%) | episodes {self.episodes}/{self.total} | "
                f"{rate:.1f} calls/s | failed episodes {self.failed}, calls {self.failed_calls} | "
                f"mean reward/tick {mean:+.4f} | elapsed {_clock(elapsed)} | ETA {eta}")

    def note(self, text: str) -> None:
        """A one-off message (e.g. what an interrupted run is doing), above a live bar or as a line."""
        if self.mode is None:
            return
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            print(f"[rlaif-gym] {text}", file=self.stream, flush=True)

    def _refresh_live(self) -> None:
        self._last_refresh = time.perf_counter()
        self._bar.update(self._task, completed=self.ticks, total=max(self.planned, 1), stats=self._live_stats())

    def _live_stats(self) -> str:
        elapsed = time.perf_counter() - self._start
        rate = self.calls / elapsed if elapsed > 0 else 0.0
        return (f"episodes {self.episodes}/{self.total}  {rate:.1f} calls/s  failed {self.failed} "
                f"(calls {self.failed_calls})")

    async def _lines(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            print(f"[rlaif-gym] {self.status()}", file=self.stream, flush=True)

    # -- lifetime -----------------------------------------------------------------------------

    def __enter__(self) -> ProgressDisplay:
        self._start = time.perf_counter()
        if self.mode == "live":
            try:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                    TimeRemainingColumn,
                )
            except ImportError:  # no rich ([cli] extra): plain lines still say the run is alive
                self.mode = "lines"
            else:
                self._bar = Progress(TextColumn("ticks"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                     TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[stats]}"),
                                     console=Console(file=self.stream), transient=False)
                self._bar.__enter__()
                self._task = self._bar.add_task("collect", total=max(self.planned, 1), stats=self._live_stats())
        if self.mode == "lines":
            try:
                self._heartbeat = asyncio.get_running_loop().create_task(self._lines())
            except RuntimeError:  # no running loop: only the final line
                self._heartbeat = None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        if self._bar is not None:
            self._refresh_live()
            self._bar.__exit__(*exc)
            self._bar = None
        elif self.mode == "lines":
            print(f"[rlaif-gym] {'done' if exc[0] is None else 'stopped'}: {self.status()}", file=self.stream,
                  flush=True)
