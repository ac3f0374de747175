"""Shared pieces of the notebook widgets: paths, the smoke switch, errors shown in the UI, PNGs.

ipywidgets swallows exceptions raised in observers and ``on_click`` handlers (at best a traceback
lands in the browser console), so every handler here goes through `guarded`: the exception's
message is written into an error widget (CSS class ``fib-error``) and kept in ``obj.error``,
where tests and users can see it; the UI keeps its last good outputs.

Environment variables read by the notebooks:

    FIBLAB_SMOKE=1     smoke scale: every notebook runs top to bottom in seconds (the tests)
    FIBLAB_STORE       the experiment store (default <project>/runs/fiblab.db)
    FIBLAB_RUNS        the runs folder (default <project>/runs)

<project> is `lab.util.paths.work_dir`: the source checkout when running from one, else the working
directory (an installed fiblab never writes into site-packages).
"""

from __future__ import annotations

import functools
import html
import os
import threading
from pathlib import Path

import ipywidgets as W

from lab.machine import cpu_share
from lab.util import paths

ROOT: Path = paths.work_dir()  # the checkout, or the working directory of an installed fiblab


def smoke() -> bool:
    """True when FIBLAB_SMOKE is set to 1 / true / yes (the notebooks' smoke scale)."""
    return os.environ.get("FIBLAB_SMOKE", "").strip().lower() in ("1", "true", "yes", "on")


def store_path() -> str:
    """The experiment store the notebooks use (FIBLAB_STORE, default <project>/runs/fiblab.db)."""
    return paths.store_path(paths.work_dir())


def runs_dir() -> str:
    """The runs folder the notebooks use (FIBLAB_RUNS, default <project>/runs)."""
    return paths.runs_dir(paths.work_dir())


def error_widget() -> W.HTML:
    """An empty HTML widget with class ``fib-error`` that `guarded` writes messages into."""
    w = W.HTML(value="")
    w.add_class("fib-error")
    return w


def error_text(exc: BaseException | str) -> str:
    """What the error line says: a ValueError's message is written for the user (the value and
    the fix); an OSError names the file; anything else is a bug, and says so."""
    if isinstance(exc, str):
        return exc
    if isinstance(exc, (ValueError, OSError)):
        return str(exc)
    return (
        f"unexpected {type(exc).__name__} (a bug in fiblab: please report it with what you "
        f"did): {exc}"
    )


def show_error(target, exc: BaseException | str | None) -> None:
    """Set ``target.error`` (str or None) and its ``error_box`` widget."""
    msg = None if exc is None else error_text(exc)
    target.error = msg
    target.error_box.value = (
        ""
        if msg is None
        else (f"<div style='color:#b00020;font-weight:bold'>⚠ {html.escape(msg)}</div>")
    )


def guarded(method):
    """Decorate a handler: an exception is shown in the object's error widget (and kept in
    ``obj.error``) instead of being raised into ipywidgets, which would swallow it."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - surfaced in the UI
            show_error(self, e)
            return None

    return wrapper


def parse_numbers(text: str, what: str, cast=float, example: str = "1, 3, 9") -> list:
    """Comma/space separated numbers; a ValueError names the bad item and the fix, with an
    ``example`` of the values this box takes (an α list is not a list of offsets)."""
    items = [t for t in text.replace(",", " ").split() if t]
    if not items:
        raise ValueError(f"{what} is empty: write numbers separated by commas, e.g. {example}")
    out = []
    for t in items:
        try:
            v = cast(t)
        except ValueError:
            raise ValueError(
                f"{what}: {t!r} is not a number; write numbers separated by commas, e.g. {example}"
            ) from None
        out.append(v)
    return out


def png(fig) -> bytes:
    """Render a matplotlib Figure (Agg, no pyplot state) to PNG bytes at its own size
    (figsize × dpi pixels, nothing cropped), so that `set_png` can show it 1:1."""
    from analysis.figures import style

    return style.png(fig)


def image_widget() -> W.Image:
    """A PNG Image widget (CSS class ``fib-figure``), hidden until `set_png` gives it content
    (no broken-image icon)."""
    image = W.Image(format="png", layout=W.Layout(display="none"))
    image.add_class("fib-figure")
    return image


def set_png(image: W.Image, data: bytes) -> None:
    """Show ``data`` (PNG bytes) in ``image`` at the PNG's own pixel size and make it visible.

    The widget's width is set from the PNG header (without it a VBox stretches the image to its
    own width: a small figure blown up several times and blurred), at most the output area's."""
    from analysis.figures import style

    w, h = style.png_size(data)
    image.value = data
    image.width, image.height = str(w), str(h)
    # its own size where the output area has room, scaled down whole (aspect kept) where it
    # has not: a figure wider than the area is never cropped, nor its legend hidden behind a
    # horizontal scroll (issue 28)
    image.layout.width, image.layout.height = f"{w}px", "auto"
    image.layout.max_width = "100%"
    image.layout.min_width = None
    image.layout.display = None


def figure(width: float, height: float, dpi: int | None = None, layout: str | None = None):
    """A pyplot-free Agg figure (no global state, safe from threads) of ``width`` × ``height``
    inches at ``dpi`` (default: the lab's, 96 = one CSS pixel a dot), in the lab's seaborn
    theme (`analysis.figures.style`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from analysis.figures import style

    style.apply_theme()
    fig = Figure(figsize=(width, height), dpi=style.DPI if dpi is None else dpi, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def html_table(header: list[str], rows: list[list], cls: str = "") -> str:
    """A small HTML table (cells escaped)."""
    head = "".join(f"<th style='padding:2px 8px'>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td style='padding:1px 8px;text-align:right'>{html.escape(str(c))}</td>" for c in r
        )
        + "</tr>"
        for r in rows
    )
    return f"<table class='{cls}' style='border-collapse:collapse'><tr>{head}</tr>{body}</table>"


class Watcher:
    """The live view's timer, one for every panel: every ``every`` seconds call ``refresh()``
    (which returns the run's state, or None) in a background thread; when the state changes
    call ``on_change(state)`` (the panels refresh their run list), and end once the state is
    terminal (``done`` / ``stopped`` / ``failed``).  An exception is shown in ``panel``'s error
    box and the timer goes on."""

    TERMINAL = ("done", "stopped", "failed")

    def __init__(self, panel, refresh, on_change=None, name: str = "fiblab-watch"):
        self.panel, self.refresh, self.on_change, self.name = panel, refresh, on_change, name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, every: float, state: str | None = None) -> None:
        self.stop()
        self._stop = threading.Event()
        ev, seen = self._stop, state

        def loop():
            nonlocal seen
            while not ev.wait(every):
                try:
                    now = self.refresh()
                    if now is not None and now != seen:
                        seen = now
                        if self.on_change is not None:
                            self.on_change(now)
                except Exception as e:  # noqa: BLE001 - shown in the UI
                    show_error(self.panel, e)
                    continue
                if now in self.TERMINAL:
                    break

        self._thread = threading.Thread(target=loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the timer (the run itself goes on)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


class Shown:
    """A panel that shows as its ``widget`` when it is a cell's last value."""

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


class LaunchPanel(Shown):
    """A panel with launch / stop / resume buttons over a detached job (training run, probe
    grid, search): the handlers go through `guarded` to the panel's own ``launch``, ``stop``
    and ``resume``; ``state`` is the last snapshot's (``self.snap``), "idle" before one.
    ``share_box`` (made by `share_widget`, redrawn by `show_share`) says what shares this
    machine's cores."""

    snap = None
    share_box = None

    @property
    def state(self) -> str:
        s = self.snap
        if s is None:
            return "idle"
        return s["state"] if isinstance(s, dict) else s.state

    def share_widget(self) -> W.HTML:
        """The line (CSS class ``fib-cpu-share``) naming the other lab jobs live on this
        machine and the threads a new job would get — or, while this panel's job runs, the
        threads it uses (`lab.machine.cpu_share`: jobs side by side share the cores)."""
        self.share_box = W.HTML()
        self.share_box.add_class("fib-cpu-share")
        self.show_share()
        return self.share_box

    def show_share(self) -> None:
        """Redraw the `share_widget` line from the machine's job registry."""
        if self.share_box is None:
            return
        handle = getattr(self, "handle", None)
        live = handle is not None and self.state in ("starting", "running", "stopping")
        # a launched job leads its own process group: its workers and ranks are in it too
        line = cpu_share.describe(
            cpu_share.live_jobs(), cpu_share.cores(), handle.pid if live else None
        )
        self.share_box.value = f"<span style='color:#555'>this machine: {html.escape(line)}</span>"

    @guarded
    def _on_launch(self, button=None) -> None:
        self.launch()

    @guarded
    def _on_stop(self, button=None) -> None:
        self.stop()

    @guarded
    def _on_resume(self, button=None) -> None:
        self.resume()
