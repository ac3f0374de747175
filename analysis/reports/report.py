"""A results report as Markdown and HTML: headings, prose, tables (DataFrames) and figures.

The report is an ordered list of blocks; `write(out_dir)` renders it to ``report.md`` and
``report.html`` in ``out_dir`` and saves every figure there as a PNG.  The HTML carries its
figures inside it (PNG data URIs), so it shows them wherever it is opened — JupyterLab's HTML
viewer (a sandboxed frame that cannot fetch files beside it), a browser from disk, a copy sent
on its own; the Markdown refers to the PNGs by paths relative to itself (JupyterLab's Markdown
preview and GitHub resolve them), so move its folder as a whole.  A missing value is an empty
cell in the Markdown and "—" in the HTML; each file says so in a legend under its title.  Wide
tables scroll inside their own box in the HTML, their headers wrap at "_".

>>> r = Report("demo")
>>> r.heading("Perplexity"); r.table(df, caption="held-out ppl"); r.figure(fig, "ppl")
>>> r.write("reports/demo")                                      # doctest: +SKIP

`records()` gives every table as JSON-ready rows (``fiblab report --json``): the numbers the
Markdown prints, missing values as None.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lab.util.jsonio import clean
from lab.util.files import atomic_write

__all__ = [
    "Report",
    "markdown_table",
    "html_table",
    "png_data_uri",
    "table_records",
    "MISSING_MD",
    "MISSING_HTML",
]


#: What a missing value (None, NaN, pandas' <NA> / NaT) is shown as in each format.
MISSING_MD, MISSING_HTML = "", "—"
LEGEND_MD = (
    "*In the tables an empty cell is a missing value (e.g. the window W of a dense model, the "
    "std of a single seed). The figures are the PNG files beside this file: move or zip the "
    "folder as a whole (report.html carries its figures inside it).*"
)
LEGEND_HTML = (
    "In the tables — is a missing value (e.g. the window W of a dense model, the std of a "
    "single seed). The figures are embedded in this file; the PNG files beside it are the same "
    "figures."
)


def _missing(x: Any) -> bool:
    """None, NaN, pandas' NA or NaT (a nullable integer column's gaps print as "<NA>")."""
    if x is None or x is pd.NA or x is pd.NaT:
        return True
    return isinstance(x, (float, np.floating)) and math.isnan(x)


def _cell(x: Any, decimals: int, missing: str = MISSING_MD) -> str:
    """One table cell as text: floats rounded, missing values ``missing`` (blank in Markdown),
    everything else str()."""
    if _missing(x):
        return missing
    if isinstance(x, (float, np.floating)):
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return f"{float(x):.{decimals}f}"
    return str(x)


def _numeric(df: pd.DataFrame) -> list[bool]:
    return [
        pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
        for c in df.columns
    ]


def _emphasis(text: str) -> str:
    """``text`` as Markdown emphasis that renders: stripped (a delimiter next to a space does not
    open or close), inner asterisks escaped."""
    text = " ".join(text.split()).replace("*", "\\*")
    return f"*{text}*" if text else ""


def markdown_table(df: pd.DataFrame, decimals: int = 3, index: bool = False) -> str:
    """A GitHub-flavoured Markdown table; numbers right-aligned, text left-aligned."""
    if index:
        df = df.reset_index()
    cols = [str(c) for c in df.columns]
    numeric = _numeric(df)
    rows = [
        [_cell(v, decimals).replace("|", "\\|") for v in rec]
        for rec in df.itertuples(index=False, name=None)
    ]
    head = "| " + " | ".join(cols) + " |"
    rule = "|" + "|".join("---:" if n else "---" for n in numeric) + "|"
    body = ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def html_table(df: pd.DataFrame, decimals: int = 3, index: bool = False, caption: str = "") -> str:
    """A table as HTML inside its own scroll box (``fib-table-box``: a wide table scrolls there,
    not the page): numbers right-aligned, text left-aligned, missing values "—", headers that
    wrap after "_" (fineweb_edu_paper → fineweb_edu_ / paper)."""
    if index:
        df = df.reset_index()
    esc = html.escape
    numeric = _numeric(df)
    head = "".join(f"<th>{esc(str(c)).replace('_', '_<wbr>')}</th>" for c in df.columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='{'num' if n else 'text'}'>{esc(_cell(v, decimals, MISSING_HTML))}</td>"
            for v, n in zip(rec, numeric)
        )
        + "</tr>"
        for rec in df.itertuples(index=False, name=None)
    )
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return (
        f'<div class="fib-table-box"><table class="fib">{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def png_data_uri(data: bytes) -> str:
    """PNG bytes as a ``data:`` URI, for an <img> that needs no file beside the page."""
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _json_cell(x: Any, decimals: int) -> Any:
    """One table cell as the Markdown prints it, for JSON: floats rounded to ``decimals``,
    NaN / inf / missing as None, numpy scalars as Python numbers."""
    x = clean(x)
    if isinstance(x, float):
        return float(f"{x:.{decimals}f}")
    return x


def table_records(df: pd.DataFrame, decimals: int = 3, index: bool = False) -> list[dict]:
    """The rows of a table as dicts (column → value), the values as the Markdown table of the
    same ``decimals`` prints them (missing: None)."""
    if index:
        df = df.reset_index()
    cols = [str(c) for c in df.columns]
    return [
        dict(zip(cols, (_json_cell(v, decimals) for v in rec)))
        for rec in df.itertuples(index=False, name=None)
    ]


@dataclass
class _Block:
    kind: str  # heading | text | table | figure | code
    payload: Any
    meta: dict = field(default_factory=dict)


class Report:
    """An ordered report; build it with the methods below, then `write` it."""

    def __init__(self, title: str):
        self.title = title
        self.blocks: list[_Block] = []
        self._names: set[str] = set()
        self._tables: set[str] = set()

    # ---- building ------------------------------------------------------------------------
    def heading(self, text: str, level: int = 2) -> None:
        if not 1 <= level <= 4:
            raise ValueError(f"heading level {level} must be 1–4")
        self.blocks.append(_Block("heading", text, {"level": level}))

    def text(self, markdown: str) -> None:
        """A paragraph (Markdown; in HTML it is shown as plain paragraphs and bullet lists)."""
        self.blocks.append(_Block("text", markdown.strip()))

    def bullets(self, lines) -> None:
        self.text("\n".join(f"- {line}" for line in lines))

    def code(self, text: str) -> None:
        self.blocks.append(_Block("code", text.rstrip()))

    def table(
        self,
        df: pd.DataFrame,
        caption: str = "",
        decimals: int = 3,
        index: bool = False,
        name: str | None = None,
    ) -> None:
        """A table; ``name`` is its key in `records` (default ``table{k}``, k its position)."""
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"table() needs a pandas DataFrame, got {type(df).__name__}")
        if name is None:
            name = f"table{sum(b.kind == 'table' for b in self.blocks) + 1}"
        if name in self._tables:
            raise ValueError(f"table name {name!r} is used twice in this report")
        self._tables.add(name)
        meta = {"caption": caption, "decimals": decimals, "index": index, "name": name}
        self.blocks.append(_Block("table", df.copy(), meta))

    def figure(self, fig, name: str, caption: str = "") -> None:
        """A matplotlib Figure, saved as ``name.png`` when the report is written."""
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)
        if safe in self._names:
            raise ValueError(f"figure name {name!r} is used twice in this report")
        self._names.add(safe)
        self.blocks.append(_Block("figure", fig, {"name": safe, "caption": caption}))

    # ---- rendering -----------------------------------------------------------------------
    def records(self) -> dict[str, list[dict]]:
        """Every table by name, in report order: its rows as `table_records` (the numbers the
        Markdown prints; missing values None, so `lab.util.jsonio.dumps` writes strict JSON)."""
        return {
            b.meta["name"]: table_records(b.payload, b.meta["decimals"], b.meta["index"])
            for b in self.blocks
            if b.kind == "table"
        }

    def markdown(self) -> str:
        out = [f"# {self.title}", "", LEGEND_MD, ""]
        for b in self.blocks:
            if b.kind == "heading":
                out += ["#" * b.meta["level"] + " " + b.payload, ""]
            elif b.kind == "text":
                out += [b.payload, ""]
            elif b.kind == "code":
                out += ["```", b.payload, "```", ""]
            elif b.kind == "table":
                if b.meta["caption"]:
                    out += [_emphasis(b.meta["caption"]), ""]
                out += [markdown_table(b.payload, b.meta["decimals"], b.meta["index"]), ""]
            elif b.kind == "figure":
                alt = (b.meta["caption"] or b.meta["name"]).replace("[", "(").replace("]", ")")
                out += [f"![{alt}]({b.meta['name']}.png)", ""]
                if b.meta["caption"]:
                    out += [_emphasis(b.meta["caption"]), ""]
        return "\n".join(out).rstrip() + "\n"

    def html(self, figures: dict[str, bytes] | None = None) -> str:
        """The report as one self-contained page: ``figures`` ({name: PNG bytes}, rendered by
        `write`; default: rendered here) are embedded as data URIs."""
        esc = html.escape
        if figures is None:
            figures = self._pngs()
        body = [f"<h1>{esc(self.title)}</h1>", f'<p class="fib-legend">{esc(LEGEND_HTML)}</p>']
        for b in self.blocks:
            if b.kind == "heading":
                n = b.meta["level"]
                body.append(f"<h{n}>{esc(b.payload)}</h{n}>")
            elif b.kind == "text":
                body.append(_text_html(b.payload))
            elif b.kind == "code":
                body.append(f"<pre>{esc(b.payload)}</pre>")
            elif b.kind == "table":
                body.append(
                    html_table(b.payload, b.meta["decimals"], b.meta["index"], b.meta["caption"])
                )
            elif b.kind == "figure":
                name, cap = b.meta["name"], b.meta["caption"]
                body.append(
                    f'<figure id="fig-{name}"><img src="{png_data_uri(figures[name])}" '
                    f'alt="{esc(cap or name)}" title="{esc(name)}.png">'
                    + (f"<figcaption>{esc(cap)}</figcaption>" if cap else "")
                    + "</figure>"
                )
        style = (
            "body{font-family:sans-serif;max-width:70em;margin:2em auto;padding:0 1em;"
            "line-height:1.4}"
            ".fib-legend{color:#555;font-size:90%}"
            ".fib-table-box{max-width:100%;overflow-x:auto;margin:1em 0}"
            "table.fib{border-collapse:collapse}"
            "table.fib td,table.fib th{border:1px solid #ccc;padding:2px 8px;vertical-align:top}"
            "table.fib th{background:#f3f3f3;text-align:center;vertical-align:bottom}"
            "table.fib td.num{text-align:right;white-space:nowrap;"
            "font-variant-numeric:tabular-nums}"
            "table.fib td.text{text-align:left;min-width:6em;max-width:40em}"
            "caption{font-style:italic;text-align:left;caption-side:top;padding:0 0 .3em}"
            "figure{margin:1em 0}img{max-width:100%;height:auto}"
            "figcaption{font-style:italic;color:#444}"
            "pre{background:#f6f6f6;padding:.5em;overflow:auto}"
        )
        return (
            "<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{esc(self.title)}</title><style>{style}</style></head><body>\n"
            + "\n".join(body)
            + "\n</body></html>\n"
        )

    def _pngs(self, dpi: int | None = None) -> dict[str, bytes]:
        """Every figure as PNG bytes, by name, at the pixel size it was drawn at (``dpi`` None:
        each figure's own, `analysis.figures.style`), not cropped, so a page shows it 1:1."""
        out = {}
        for b in self.blocks:
            if b.kind == "figure":
                buf = io.BytesIO()
                fig = b.payload
                fig.savefig(
                    buf, format="png", dpi=fig.dpi if dpi is None else dpi, bbox_inches=None
                )
                out[b.meta["name"]] = buf.getvalue()
        return out

    def write(self, out_dir: str, dpi: int | None = None) -> dict[str, str]:
        """Render to ``out_dir`` (created): the figures as PNGs, report.md (which refers to
        them) and report.html (which embeds the same bytes); returns the paths written."""
        os.makedirs(out_dir, exist_ok=True)
        paths = {}
        figures = self._pngs(dpi)
        for name, data in figures.items():
            p = os.path.join(out_dir, name + ".png")
            with open(p, "wb") as f:
                f.write(data)
            paths[name] = p
        for name, text in (("report.md", self.markdown()), ("report.html", self.html(figures))):
            p = os.path.join(out_dir, name)
            atomic_write(p, text)
            paths[name] = p
        return paths


def _inline_html(s: str) -> str:
    """Markdown inline marks as HTML: `code` (kept as written inside), **bold** and *emphasis*
    (which may span a code span; an escaped ``\\*`` stays a literal asterisk)."""
    codes: list[str] = []

    def keep(m: re.Match) -> str:
        codes.append(f"<code>{html.escape(m.group(1))}</code>")
        return f"\x01{len(codes) - 1}\x01"

    s = re.sub(r"`([^`]+)`", keep, s)
    s = html.escape(s).replace("\\*", "\x00")
    s = re.sub(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", r"<b>\1</b>", s)
    s = re.sub(r"\*(?=\S)([^*]+?)(?<=\S)\*", r"<em>\1</em>", s)
    s = s.replace("\x00", "*")
    return re.sub("\x01(\\d+)\x01", lambda m: codes[int(m.group(1))], s)


def _text_html(markdown: str) -> str:
    """Just enough Markdown for report prose: paragraphs, '- ' bullet lists, `code`, **bold**
    and *emphasis* (so that no literal asterisks reach the page)."""
    out = []
    for para in markdown.split("\n\n"):
        lines = para.splitlines()
        if lines and all(line.startswith("- ") for line in lines):
            items = "".join(f"<li>{_inline_html(line[2:])}</li>" for line in lines)
            out.append(f"<ul>{items}</ul>")
        else:
            out.append(f"<p>{_inline_html(' '.join(lines))}</p>")
    return "\n".join(out)
