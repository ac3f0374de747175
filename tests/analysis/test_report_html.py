"""Reports that show wherever they are opened (issue 14, item 7): the exported report of the
results panel (notebook 05) and of `fiblab report`, on the smoke fixture store with a dense run
(no W: a missing value) and the authors' database rebuilt (the wide Table 1 of 15 columns).

Checked against independent readers: the HTML through Python's html.parser (every <img> a data
URI that decodes to the very PNG written beside the report, every table in a scroll box, no
"<NA>" / "nan" cell, no literal asterisk in the visible text), the Markdown through a CommonMark
renderer (markdown-it-py, as JupyterLab's preview and GitHub render it: every image path resolves
from the report's folder, even after the folder is moved, and no caption keeps its asterisks)."""

import base64
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fixture_store import smoke_store
from paperdb_fixture import build_fixture

from analysis.reports.report import MISSING_HTML, Report, html_table, markdown_table
from fiblab.cli import main as fiblab_main
from fiblab.ui.results import ResultsPanel

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BAD_CELLS = {"<NA>", "nan", "NaN", "None", "NaT", "<na>"}


class Page(HTMLParser):
    """The parts of a report page the tests read: images, table cells (with the header row),
    whether each table sits in a ``fib-table-box``, and the visible text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.images: list[dict] = []
        self.tables: list[dict] = []  # {"boxed", "header", "rows"}
        self.text: list[str] = []
        self._stack: list[tuple[str, dict]] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._skip = 0  # inside <style> / <title>

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("style", "title"):
            self._skip += 1
        if tag == "img":
            self.images.append(a)
        elif tag == "table":
            boxed = any(
                t == "div" and "fib-table-box" in (at.get("class") or "").split()
                for t, at in self._stack
            )
            self.tables.append({"boxed": boxed, "header": [], "rows": []})
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        if tag not in ("img", "br", "wbr", "meta"):
            self._stack.append((tag, a))

    def handle_endtag(self, tag):
        if tag in ("style", "title"):
            self._skip -= 1
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(("th" if tag == "th" else "td", "".join(self._cell)))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            table = self.tables[-1]
            if all(kind == "th" for kind, _ in self._row):
                table["header"] = [t for _, t in self._row]
            else:
                table["rows"].append([t for _, t in self._row])
            self._row = None
        while self._stack:
            if self._stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        if self._skip:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(path) -> Page:
    p = Page()
    p.feed(Path(path).read_text(encoding="utf-8"))
    return p


def md_images(md_text: str) -> list[str]:
    """The src of every image of the Markdown as a CommonMark renderer reads it."""
    mdit = pytest.importorskip("markdown_it")
    html = mdit.MarkdownIt("commonmark").enable("table").render(md_text)
    return re.findall(r'<img src="([^"]+)"', html)


def md_rendered_text(md_text: str) -> str:
    """The Markdown rendered by CommonMark (with tables), tags and code spans removed: what a
    reader sees, less the code."""
    mdit = pytest.importorskip("markdown_it")
    html = mdit.MarkdownIt("commonmark").enable("table").render(md_text)
    html = re.sub(r"<code>.*?</code>", "", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def md_tables(md_text: str) -> list[list[list[str]]]:
    """Every Markdown table as rows of stripped cells (header first, the rule line dropped)."""
    tables, cur = [], None
    for line in md_text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if cur is None:
                cur = []
                tables.append(cur)
            if not all(re.fullmatch(r"-+:?", c) for c in cells):
                cur.append(cells)
        else:
            cur = None
    return tables


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The panel's export of the smoke store, with the (synthetic) authors' database."""
    d = tmp_path_factory.mktemp("report")
    store = smoke_store(str(d / "smoke.db"))
    db = build_fixture(d / "fib.db")
    panel = ResultsPanel(store, paper_db=str(db), reports_dir=str(d / "reports"), name="r1")
    md = Path(panel.export())
    assert panel.error is None, panel.error
    return panel, md


def test_every_image_of_the_html_is_embedded_and_is_the_png_beside_it(exported):
    panel, md = exported
    page = parse(md.parent / "report.html")
    pngs = sorted(md.parent.glob("*.png"))
    names = {"extrapolation", "position-bins", "lm-alphas", "probe-alphas", "paperdb-ppl-vs-W"}
    assert {p.stem for p in pngs} == names
    assert len(page.images) == len(pngs)
    for img in page.images:
        src = img["src"]
        assert src.startswith("data:image/png;base64,"), src[:60]
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data.startswith(PNG_MAGIC)
        name = img["title"].removesuffix(".png")
        assert data == (md.parent / f"{name}.png").read_bytes()  # the same figure
        assert img["alt"]


def test_the_html_alone_elsewhere_needs_no_file_beside_it(exported, tmp_path):
    _, md = exported
    alone = tmp_path / "elsewhere" / "copy.html"
    alone.parent.mkdir()
    shutil.copy(md.parent / "report.html", alone)
    for img in parse(alone).images:
        assert img["src"].startswith("data:")  # nothing relative left to break


def test_markdown_images_resolve_from_the_report_folder_even_after_a_move(exported, tmp_path):
    _, md = exported
    moved = tmp_path / "moved" / "r1"
    shutil.copytree(md.parent, moved)
    for folder in (md.parent, moved):
        srcs = md_images((folder / "report.md").read_text(encoding="utf-8"))
        assert len(srcs) == 5
        for src in srcs:
            assert not src.startswith(("/", "http")) and ".." not in src
            target = folder / src
            assert target.is_file() and target.read_bytes().startswith(PNG_MAGIC)


def test_no_literal_asterisks_reach_the_reader(exported):
    _, md = exported
    page = parse(md.parent / "report.html")
    visible = "".join(page.text)
    assert "*" not in visible, visible[max(0, visible.find("*") - 80) :][:160]
    text = md.read_text(encoding="utf-8")
    assert re.search(r"^\*[^*].*\*$", text, re.M)  # the captions are emphasis in the source …
    rendered = md_rendered_text(text)
    assert "*" not in rendered, rendered[max(0, rendered.find("*") - 80) :][:160]  # … not shown


def test_missing_values_are_blank_in_markdown_and_a_dash_in_html_as_the_legends_say(exported):
    _, md = exported
    text = md.read_text(encoding="utf-8")
    assert "<NA>" not in text and "nan" not in re.findall(r"\w+", text)
    assert "an empty cell is a missing value" in text.splitlines()[2]
    tables = md_tables(text)
    assert tables
    for rows in tables:
        for row in rows:
            assert not BAD_CELLS & set(row), row
    final = next(t for t in tables if t[0][:3] == ["run", "config", "W"])
    dense = next(r for r in final if r[0] == "smoke-dense-s0")
    assert dense[2] == ""  # a dense model has no window W

    page = parse(md.parent / "report.html")
    legend = "".join(page.text)
    assert f"In the tables {MISSING_HTML} is a missing value" in legend
    for table in page.tables:
        for row in table["rows"]:
            assert not BAD_CELLS & set(row), row
            assert "" not in row, (table["header"], row)  # missing is "—", never blank
    final = next(t for t in page.tables if t["header"][:3] == ["run", "config", "W"])
    dense = next(r for r in final["rows"] if r[0] == "smoke-dense-s0")
    assert dense[2] == MISSING_HTML


def test_wide_tables_scroll_in_their_own_box_and_headers_wrap(exported):
    _, md = exported
    page = parse(md.parent / "report.html")
    assert page.tables and all(t["boxed"] for t in page.tables)
    raw = (md.parent / "report.html").read_text(encoding="utf-8")
    assert re.search(r"\.fib-table-box\{[^}]*overflow-x:auto", raw)
    wide = next(t for t in page.tables if "fineweb_edu_diff" in t["header"])  # the fib.db one
    assert len(wide["header"]) == 15  # base, schedule, W and 4 datasets × (ours, paper, diff)
    assert "fineweb_<wbr>edu_<wbr>paper" in raw  # breaks only after "_", never inside a word


def test_the_panel_links_open_both_files_relative_to_the_working_folder(
    exported, monkeypatch, tmp_path
):
    panel, md = exported
    (out,) = panel.export_links.outputs
    links = re.findall(r"href='([^']+)'", out["data"]["text/html"])
    assert len(links) == 2
    for href in links:  # relative to the folder export ran in, as JupyterLab resolves them
        assert (Path.cwd() / href).resolve() in {md.resolve(), (md.parent / "report.html")}
    monkeypatch.chdir(md.parent.parent)  # a kernel started in reports/
    panel.export()
    (out,) = panel.export_links.outputs
    assert re.findall(r"href='([^']+)'", out["data"]["text/html"]) == [
        "r1/report.html",
        "r1/report.md",
    ]


def test_fiblab_report_writes_the_same_self_contained_html(exported, tmp_path, capsys):
    panel, _ = exported
    out = tmp_path / "cli"
    assert fiblab_main(["report", "--store", panel.store, "--out", str(out)]) == 0
    assert "report.html" in capsys.readouterr().out
    page = parse(out / "report.html")
    assert len(page.images) == len(list(out.glob("*.png"))) == 4  # no fib.db figure here
    assert all(img["src"].startswith("data:image/png;base64,") for img in page.images)
    assert "*" not in "".join(page.text)
    assert "<NA>" not in (out / "report.md").read_text(encoding="utf-8")


def test_inline_marks_and_cells_by_hand():
    import pandas as pd

    r = Report("t")
    r.text("*extrapolation: not available — run `fiblab eval runs/NAME` (it logs them).*")
    r.text(r"**bold** and a literal \* star")
    page = r.html(figures={})
    assert (
        "<p><em>extrapolation: not available — run <code>fiblab eval runs/NAME</code> "
        "(it logs them).</em></p>" in page
    )
    assert "<p><b>bold</b> and a literal * star</p>" in page
    df = pd.DataFrame({"a_b": pd.array([1, None], dtype="Int64"), "x": [0.5, float("nan")]})
    assert markdown_table(df, 2).splitlines()[3] == "|  |  |"  # <NA> and NaN: blank
    cells = re.findall(r"<td class='(\w+)'>([^<]*)</td>", html_table(df, 2))
    assert cells == [("num", "1"), ("num", "0.50"), ("num", "—"), ("num", "—")]
    assert "<th>a_<wbr>b</th>" in html_table(df)


def test_the_panels_wide_tables_scroll_in_their_own_box(exported):
    """The notebook's view of the same tables (the browser test checks that the box, not the
    panel, scrolls): every table of the panel boxed, headers wrapping after "_", the HTML
    widget's content allowed to shrink, a missing value "—" as in report.html."""
    panel, _ = exported
    views = [panel.paper_box.value] + [b.value for b in panel.section_boxes.values()]
    for view in views:
        page = Page()
        page.feed(view)
        assert page.tables and all(t["boxed"] for t in page.tables)
    assert "fineweb_<wbr>edu_<wbr>paper" in panel.paper_box.value
    assert ".widget-html-content:has(.fib-table-box){min-width:0" in panel.paper_box.value
    page = Page()
    page.feed(panel.section_boxes["table5"].value)
    ours = page.tables[0]
    dense = next(r for r in ours["rows"] if r[0] == "dense")
    assert dense[ours["header"].index("W")] == MISSING_HTML
