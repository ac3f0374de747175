"""A results report as Markdown and HTML: headings, prose, tables (DataFrames) and figures.

The report is an ordered list of blocks; `write(out_dir)` renders it to ``report.md`` and
``report.html`` in ``out_dir`` and saves every figure there as a PNG (the Markdown and HTML refer
to them by relative path, so the folder can be moved or zipped as a whole).

>>> r = Report("demo")
>>> r.heading("Perplexity"); r.table(df, caption="held-out ppl"); r.figure(fig, "ppl")
>>> r.write("reports/demo")                                      # doctest: +SKIP

`records()` gives every table as JSON-ready rows (``fiblab report --json``): the numbers the
Markdown prints, missing values as None.
"""

from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from lab.jsonio import clean

__all__ = ["Report", "markdown_table", "table_records"]


def _cell(x: Any, decimals: int) -> str:
    """One table cell as text: floats rounded, NaN/None blank, everything else str()."""
    if x is None:
        return ""
    if isinstance(x, float):
        if math.isnan(x):
            return ""
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return f"{x:.{decimals}f}"
    return str(x)


def markdown_table(df: pd.DataFrame, decimals: int = 3, index: bool = False) -> str:
    """A GitHub-flavoured Markdown table; numbers right-aligned, text left-aligned."""
    if index:
        df = df.reset_index()
    cols = [str(c) for c in df.columns]
    numeric = [
        pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
        for c in df.columns
    ]
    rows = [
        [_cell(v, decimals).replace("|", "\\|") for v in rec]
        for rec in df.itertuples(index=False, name=None)
    ]
    head = "| " + " | ".join(cols) + " |"
    rule = "|" + "|".join("---:" if n else "---" for n in numeric) + "|"
    body = ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join([head, rule, *body])


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
        Markdown prints; missing values None, so `lab.jsonio.dumps` writes strict JSON)."""
        return {
            b.meta["name"]: table_records(b.payload, b.meta["decimals"], b.meta["index"])
            for b in self.blocks
            if b.kind == "table"
        }

    def markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for b in self.blocks:
            if b.kind == "heading":
                out += ["#" * b.meta["level"] + " " + b.payload, ""]
            elif b.kind == "text":
                out += [b.payload, ""]
            elif b.kind == "code":
                out += ["```", b.payload, "```", ""]
            elif b.kind == "table":
                if b.meta["caption"]:
                    out += [f"*{b.meta['caption']}*", ""]
                out += [markdown_table(b.payload, b.meta["decimals"], b.meta["index"]), ""]
            elif b.kind == "figure":
                out += [f"![{b.meta['caption'] or b.meta['name']}]({b.meta['name']}.png)", ""]
                if b.meta["caption"]:
                    out += [f"*{b.meta['caption']}*", ""]
        return "\n".join(out).rstrip() + "\n"

    def html(self) -> str:
        esc = html.escape
        body = [f"<h1>{esc(self.title)}</h1>"]
        for b in self.blocks:
            if b.kind == "heading":
                n = b.meta["level"]
                body.append(f"<h{n}>{esc(b.payload)}</h{n}>")
            elif b.kind == "text":
                body.append(_text_html(b.payload))
            elif b.kind == "code":
                body.append(f"<pre>{esc(b.payload)}</pre>")
            elif b.kind == "table":
                fmt = f"{{:.{b.meta['decimals']}f}}".format
                cap = f"<caption>{esc(b.meta['caption'])}</caption>" if b.meta["caption"] else ""
                tbl = b.payload.to_html(
                    index=b.meta["index"], float_format=fmt, na_rep="", border=0, classes="fib"
                )
                _, _, rest = tbl.partition(">")  # drop pandas' <table …> tag
                body.append(f'<table class="fib">{cap}' + rest)
            elif b.kind == "figure":
                cap = esc(b.meta["caption"])
                body.append(
                    f'<figure><img src="{b.meta["name"]}.png" alt="{cap}">'
                    f"<figcaption>{cap}</figcaption></figure>"
                )
        style = (
            "body{font-family:sans-serif;max-width:70em;margin:2em auto;padding:0 1em}"
            "table.fib{border-collapse:collapse;margin:1em 0}"
            "table.fib td,table.fib th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
            "caption{font-style:italic;text-align:left}img{max-width:100%}"
            "pre{background:#f6f6f6;padding:.5em;overflow:auto}"
        )
        return (
            "<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{esc(self.title)}</title><style>{style}</style></head><body>\n"
            + "\n".join(body)
            + "\n</body></html>\n"
        )

    def write(self, out_dir: str, dpi: int | None = None) -> dict[str, str]:
        """Render to ``out_dir`` (created); returns the paths written.  Figures are saved at the
        pixel size they were drawn at (``dpi`` None: each figure's own, `analysis.style`), not
        cropped, so a page shows them 1:1."""
        os.makedirs(out_dir, exist_ok=True)
        paths = {}
        for b in self.blocks:
            if b.kind == "figure":
                p = os.path.join(out_dir, b.meta["name"] + ".png")
                fig = b.payload
                fig.savefig(p, dpi=fig.dpi if dpi is None else dpi, bbox_inches=None)
                paths[b.meta["name"]] = p
        for name, text in (("report.md", self.markdown()), ("report.html", self.html())):
            p = os.path.join(out_dir, name)
            tmp = p + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, p)
            paths[name] = p
        return paths


def _text_html(markdown: str) -> str:
    """Just enough Markdown for report prose: paragraphs, '- ' bullet lists, `code`."""
    import re

    def inline(s: str) -> str:
        s = html.escape(s)
        s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
        return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", s)

    out, items = [], []
    for para in markdown.split("\n\n"):
        lines = para.splitlines()
        if lines and all(line.startswith("- ") for line in lines):
            items = "".join(f"<li>{inline(line[2:])}</li>" for line in lines)
            out.append(f"<ul>{items}</ul>")
        else:
            out.append(f"<p>{inline(' '.join(lines))}</p>")
    return "\n".join(out)
