"""The coverage explorer (notebook 01): per-layer α sliders and live coverage outputs.

`CoverageExplorer` holds the widgets, calls `explore` (`fiblab.ui.coverage_explore`, the pure
step) on every change, writes the results into its output widgets (the strings come from
`fiblab.ui.coverage_text`) and draws them with `fiblab.ui.coverage_figure`; tests set a widget
value and read ``explorer.result``.

One module of ≈ 460 lines on purpose: one widget class whose handlers (schedule, custom α, L,
reset) keep the sliders and the custom box in step through one guard; split, each handler would
reach into the others' widgets.  The pure step, the words and the figure are already apart.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import contextmanager

import ipywidgets as W

from fiblab.ui.common import (
    Shown,
    error_text,
    error_widget,
    guarded,
    image_widget,
    parse_numbers,
    set_png,
    show_error,
)
from fiblab.ui.coverage_explore import explore, schedule_alphas
from fiblab.ui.coverage_figure import CoverageFigure
from fiblab.ui.coverage_text import (
    alpha_text,
    band_html,
    layer_table_html,
    rungs_note,
    summary_line,
    union_html,
)
from lab.ladder.offsets import ROUNDINGS, Base
from lab.ladder.schedules import check_alphas
from lab.util.wording import plural

#: The rounding dropdown's words: ``round`` is Python's half-to-even (2.5 → 2), as trained.
ROUNDING_LABELS = {"round": "round (half to even)", "floor": "floor", "ceil": "ceil"}

__all__ = [
    "ALPHA_RANGE",
    "ALPHA_STEP",
    "MAX_LAYERS",
    "SCHEDULE_OPTIONS",
    "CoverageExplorer",
]

SCHEDULE_OPTIONS = [
    ("fixed (α = 1)", "fixed"),
    ("linear stagger", "stagger"),
    ("coprime stagger", "coprime"),
    ("learned init (stagger, clamped)", "learned-init"),
    ("custom", "custom"),
]
ALPHA_RANGE = (0.5, 1.5)
ALPHA_STEP = 0.01
#: The custom α box's example in its errors: α values, not the custom base's offsets.
ALPHA_EXAMPLE = "0.5, 1, 1.5"
MAX_LAYERS = 48


class CoverageExplorer(Shown):
    """Widgets for the coverage explorer; display the object (or ``.widget``) in a notebook.

    State for tests and code: ``alphas`` (the sliders), ``result`` (the last `explore` report),
    ``error`` (the message shown, or None), ``last_update_s`` / ``last_update_cpu_s`` (wall and
    CPU seconds of the last compute + render).

    Moving a slider off a named schedule switches the dropdown to "custom" (the text box then
    lists the sliders' α) and **reset to schedule** goes back to that schedule (with the custom
    box empty, to the last named schedule; with a list typed there, to that list).  Choosing
    "custom" keeps the sliders' exact α (the box shows them to 4 digits; the explorer computes
    with the exact values until a slider moves or the box is edited).  K applies to the
    Fibonacci base only: its box is disabled, with the reason beside it, for the others.
    """

    def __init__(
        self,
        schedule: str = "stagger",
        layers: int = 16,
        window: int = 8,
        rungs: int = 15,
        seq_len: int = 1024,
        base: str = "fib",
        rounding: str = "round",
        render: bool = True,
    ):
        self.render = render
        self._figure = CoverageFigure()
        self.result: dict | None = None
        self.error: str | None = None
        self.last_update_s = 0.0
        self.last_update_cpu_s = 0.0
        self.updates = 0
        self._hold = 0
        self._quiet = 0  # > 0 while the explorer itself sets the dropdown or the custom α box
        self._origin: str | None = None  # the named schedule the sliders were moved off
        self._named = schedule if schedule != "custom" else "stagger"  # the last named schedule
        self._exact: tuple[str, list[float]] | None = None  # (text written, the α behind it)
        self._controls(schedule, layers, window, rungs, seq_len, base, rounding)
        self._outputs()
        with self._batch(update=False):
            self._build_sliders(self._schedule_values())
        self._wire()
        self._sync_enabled()
        self.update()
        self.widget = self._layout()

    # -- construction: the controls, the outputs, their wiring, the layout ---------------------
    def _controls(self, schedule, layers, window, rungs, seq_len, base, rounding) -> None:
        """The settings a user changes, each with the CSS class the browser tests find it by."""
        style = {"description_width": "initial"}
        self.schedule = W.Dropdown(
            options=SCHEDULE_OPTIONS, value=schedule, description="schedule", style=style
        )
        self.custom_alphas = W.Text(
            value="",
            description="custom α",
            continuous_update=False,
            placeholder="one α per layer: 0.5, 0.6, …",
            style=style,
            layout=W.Layout(width="420px"),
        )
        self.layers = W.BoundedIntText(
            value=layers,
            min=1,
            max=MAX_LAYERS,
            description="layers L",
            style=style,
            layout=W.Layout(width="150px"),
        )
        self.window = W.BoundedIntText(
            value=window,
            min=0,
            max=4096,
            description="window W",
            style=style,
            layout=W.Layout(width="150px"),
        )
        self.rungs = W.BoundedIntText(
            value=rungs,
            min=1,
            max=40,
            description="rungs K",
            style=style,
            layout=W.Layout(width="150px"),
        )
        self.rungs_note = W.HTML(layout=W.Layout(margin="0 0 0 300px"))  # under the K box
        self.rungs_note.add_class("fib-rungs-note")
        self.seq_len = W.BoundedIntText(
            value=seq_len,
            min=2,
            max=65536,
            description="length T",
            style=style,
            layout=W.Layout(width="170px"),
        )
        self.base = W.Dropdown(
            options=[("Fibonacci", "fib"), ("power of 2", "pow2"), ("custom list", "custom")],
            value=base,
            description="base",
            style=style,
            layout=W.Layout(width="200px"),
        )
        self.custom_base = W.Text(
            value="1, 3, 9, 27, 81, 243, 729",
            description="custom base",
            continuous_update=False,
            style=style,
            layout=W.Layout(width="420px"),
        )
        self.layers_note = W.HTML()  # what a change of L did to a custom α list
        self.rounding = W.Dropdown(
            options=[(ROUNDING_LABELS.get(r, r), r) for r in ROUNDINGS],
            value=rounding,
            description="rounding",
            style=style,
            layout=W.Layout(width="250px"),  # "round (half to even)" whole
        )
        self.reset = W.Button(
            description="reset to schedule", icon="undo", layout=W.Layout(width="180px")
        )
        for w, cls in (
            (self.schedule, "fib-schedule"),
            (self.custom_alphas, "fib-custom-alphas"),
            (self.layers, "fib-layers"),
            (self.rungs, "fib-rungs"),
            (self.seq_len, "fib-seq-len"),
            (self.base, "fib-base"),
        ):
            w.add_class(cls)  # the browser tests find the controls by these

    def _outputs(self) -> None:
        """What the explorer shows: the α sliders, the union and band lines, the timing, the
        figure, the table and the error box."""
        self.sliders: list[W.FloatSlider] = []
        self.slider_box = W.VBox()
        self.slider_box.add_class("fib-alpha-sliders")
        self.union_label = W.HTML()
        self.union_label.add_class("fib-union")
        self.band_label = W.HTML()
        self.band_label.add_class("fib-band")
        self.timing = W.HTML()
        self.timing.add_class("fib-timing")
        self.image = image_widget()
        self.table = W.HTML()
        self.error_box = error_widget()

    def _wire(self) -> None:
        """Each control to its handler (a setting recomputes; the schedule, the custom α box and
        L rebuild or rewrite the sliders first)."""
        for w in (
            self.window,
            self.rungs,
            self.seq_len,
            self.base,
            self.custom_base,
            self.rounding,
        ):
            w.observe(self._on_setting, names="value")
        self.schedule.observe(self._on_schedule, names="value")
        self.custom_alphas.observe(self._on_custom_alphas, names="value")
        self.layers.observe(self._on_layers, names="value")
        self.reset.on_click(self._on_reset)

    def _layout(self) -> W.VBox:
        """The controls above, then errors, the sliders beside the coverage lines, the figure
        and the table."""
        controls = W.VBox(
            [
                W.HBox([self.schedule, self.reset]),
                self.custom_alphas,
                W.HBox([self.layers, self.window, self.rungs, self.seq_len]),
                self.layers_note,
                self.rungs_note,
                W.HBox([self.base, self.rounding]),
                self.custom_base,
            ]
        )
        widget = W.VBox(
            [
                controls,
                self.error_box,
                W.HBox([self.slider_box, W.VBox([self.union_label, self.band_label, self.timing])]),
                self.image,
                self.table,
            ]
        )
        widget.add_class("fib-coverage-explorer")
        return widget

    # -- state ---------------------------------------------------------------------------------
    @property
    def alphas(self) -> list[float]:
        return [float(s.value) for s in self.sliders]

    def set_alpha(self, layer: int, value: float) -> None:
        """Move one slider (as a user would); the outputs update."""
        if not 0 <= layer < len(self.sliders):
            raise ValueError(
                f"layer={layer} is out of range: the explorer has "
                f"{plural(len(self.sliders), 'layer')} (0..{len(self.sliders) - 1})"
            )
        self.sliders[layer].value = value

    def base_value(self) -> Base:
        """The base the widgets select: 'fib', 'pow2' or the parsed custom list."""
        if self.base.value != "custom":
            return self.base.value
        vals = parse_numbers(self.custom_base.value, "custom base")
        return tuple(int(v) if float(v).is_integer() else v for v in vals)

    def _schedule_values(self) -> list[float]:
        if self.schedule.value == "custom":
            text = self.custom_alphas.value.strip()
            if self._exact is not None and text == self._exact[0]:  # the α it was written from
                return check_alphas(self._exact[1], self.layers.value)
            if text:
                return check_alphas(
                    parse_numbers(text, "custom α", example=ALPHA_EXAMPLE), self.layers.value
                )
            return [1.0] * self.layers.value
        return schedule_alphas(self.schedule.value, self.layers.value)

    @contextmanager
    def _batch(self, update: bool = True):
        """Hold updates while several widgets change; one update at the end."""
        self._hold += 1
        try:
            yield
        finally:
            self._hold -= 1
        if update and not self._hold:
            self.update()

    def _build_sliders(self, values: Sequence[float]) -> None:
        for s in self.sliders:
            s.unobserve(self._on_slider, names="value")
        lo, hi = ALPHA_RANGE
        self.sliders = []
        for ell, a in enumerate(values):
            s = W.FloatSlider(
                value=a,
                min=lo,
                max=hi,
                step=ALPHA_STEP,
                description=f"α{ell}",
                readout_format=".3f",
                continuous_update=False,
                layout=W.Layout(width="330px"),
            )
            s.add_class("fib-alpha")
            s.observe(self._on_slider, names="value")
            self.sliders.append(s)
        self.slider_box.children = tuple(self.sliders)

    def _set_sliders(self, values: Sequence[float]) -> None:
        with self._batch(update=False):
            if len(values) != len(self.sliders):
                self._build_sliders(values)
            else:
                for s, a in zip(self.sliders, values):
                    s.value = a

    @contextmanager
    def _quietly(self):
        """Set the dropdown or the custom α box without their handlers reacting."""
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    def _write_custom(self, values: Sequence[float]) -> None:
        """List ``values`` in the custom α box and remember them exactly (the box rounds)."""
        text = alpha_text(values)
        self._exact = (text, [float(a) for a in values])
        with self._quietly():
            self.custom_alphas.value = text

    def _sync_enabled(self) -> None:
        self.custom_alphas.disabled = self.schedule.value != "custom"
        self.custom_base.disabled = self.base.value != "custom"
        self.rungs.disabled = self.base.value != "fib"
        self.rungs_note.value = rungs_note(self.base.value, self.seq_len.value)
        self.rungs_note.layout.display = None if self.rungs_note.value else "none"

    # -- handlers (errors go to the error widget) ----------------------------------------------
    def _on_slider(self, change) -> None:
        if self._hold:
            return
        if self.schedule.value != "custom":  # moved off a named schedule: say "custom"
            self._origin = self.schedule.value
            with self._quietly():
                self.schedule.value = "custom"
            self._sync_enabled()
        if self._origin is not None:  # the box lists the moved sliders (a typed list stays)
            self._write_custom(self.alphas)
        self.update()

    def _on_setting(self, change) -> None:
        self._sync_enabled()
        if not self._hold:
            self.update()

    @guarded
    def _on_schedule(self, change) -> None:
        if self._quiet:
            return
        self._origin = None
        if change["new"] != "custom":
            self._named = change["new"]
        self._sync_enabled()
        if change["new"] == "custom":  # start from the sliders' exact α: nothing changes
            self._write_custom(self.alphas)
            return
        with self._batch():
            self._set_sliders(self._schedule_values())

    @guarded
    def _on_custom_alphas(self, change) -> None:
        if self._quiet or self.schedule.value != "custom":
            return
        if not change["new"].strip():  # cleared: the sliders stay; a refused list's error goes
            self.update()
            return
        self._origin, self._exact = None, None  # the user's own list, as typed
        with self._batch():
            self._set_sliders(self._schedule_values())

    @guarded
    def _on_layers(self, change) -> None:
        L, old = change["new"], change["old"]
        self.layers_note.value = ""
        if self.schedule.value == "custom":  # keep what was set, pad with α = 1, and say so
            have = list(self.alphas)
            vals = (have + [1.0] * L)[:L]
            if L > len(have):
                note = f"L {old} → {L}: layers {len(have) + 1}–{L} added with α = 1"
            elif L < len(have):
                dropped = ", ".join(f"{a:g}" for a in have[L:])
                note = f"L {old} → {L}: the α of layers {L + 1}–{len(have)} dropped ({dropped})"
            else:
                note = ""
            self.layers_note.value = (
                f"<small class='fib-layers-note'>{note}</small>" if note else ""
            )
            with self._batch():
                self._set_sliders(vals)
                self._write_custom(vals)
        else:
            with self._batch():
                self._set_sliders(schedule_alphas(self.schedule.value, L))

    @guarded
    def _on_reset(self, button=None) -> None:
        if self.schedule.value == "custom" and not self.custom_alphas.value.strip():
            self._origin = self._origin or self._named  # nothing typed: the last named schedule
        with self._batch():
            if self._origin is not None:  # back to the schedule the sliders were moved off
                with self._quietly():
                    self.schedule.value = self._origin
                self._origin = None
                self._sync_enabled()
            self._set_sliders(self._schedule_values())

    def reset_to_schedule(self) -> None:
        """The reset button's action."""
        self._on_reset()

    # -- the update ----------------------------------------------------------------------------
    def compute(self) -> dict:
        """`explore` for the current widget values (raises ValueError on bad input)."""
        return explore(
            self.alphas,
            self.window.value,
            self.seq_len.value,
            self.base_value(),
            self.rungs.value,
            self.rounding.value,
        )

    def update(self) -> bool:
        """Recompute and redraw; on bad input show the message and keep the last outputs."""
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            rep = self.compute()
            self._render(rep)
        except Exception as e:  # noqa: BLE001 - shown, never swallowed
            show_error(self, e)
            return False
        self.result = rep
        self.last_update_s = time.perf_counter() - t0
        self.last_update_cpu_s = time.process_time() - c0
        self.updates += 1
        self.timing.value = (
            f"<small>updated in {1000 * self.last_update_s:.0f} ms "
            f"(compute {1000 * rep['seconds']:.0f} ms)</small>"
        )
        show_error(self, self._custom_not_applied())
        return True

    def _custom_not_applied(self) -> str | None:
        """While the custom α box holds a list that was refused (the sliders kept their α), its
        error stays beside every update, so the box never reads as the α in use."""
        if self.schedule.value != "custom" or not self.custom_alphas.value.strip():
            return None
        try:
            self._schedule_values()
        except ValueError as e:
            used = ", ".join(f"{a:.4g}" for a in self.alphas)
            return f"{error_text(e)} — not applied: the counts are for the α in use ({used})"
        return None

    def _render(self, rep: dict) -> None:
        self.union_label.value = union_html(rep)
        self.band_label.value = band_html(rep)
        self.table.value = layer_table_html(rep)
        if self.render:
            set_png(self.image, self._figure.draw(rep))

    def summary(self) -> str:
        """One line: the union count and its convention (for logs and tests)."""
        if self.result is None:
            return f"no result ({self.error})"
        return summary_line(self.result)
