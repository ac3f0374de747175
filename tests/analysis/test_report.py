"""The Markdown / HTML report renderer."""

import base64
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from analysis.reports.report import Report, markdown_table


def test_markdown_table_layout_and_rounding():
    df = pd.DataFrame({"schedule": ["fixed", "stagger"], "ppl": [44.0812, math.nan], "W": [8, 12]})
    text = markdown_table(df, decimals=2)
    lines = text.splitlines()
    assert lines[0] == "| schedule | ppl | W |"
    assert lines[1] == "|---|---:|---:|"  # text left, numbers right
    assert lines[2] == "| fixed | 44.08 | 8 |"
    assert lines[3] == "| stagger |  | 12 |"  # NaN is a blank cell


def test_pipe_in_text_is_escaped():
    text = markdown_table(pd.DataFrame({"a": ["x|y"]}))
    assert "x\\|y" in text.splitlines()[2]


def test_write_renders_every_block(tmp_path):
    r = Report("A run")
    r.heading("Tables")
    r.text("Stagger **beats** fixed: `yes`.\n\n- one\n- two")
    r.table(pd.DataFrame({"k": [1, 2], "v": [0.5, 0.25]}), caption="cap", decimals=2)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    r.figure(fig, "curve one", caption="a line")
    paths = r.write(str(tmp_path / "out"))
    md = open(paths["report.md"]).read()
    assert md.startswith("# A run\n")
    assert "## Tables" in md and "| 2 | 0.25 |" in md
    assert "![a line](curve-one.png)" in md
    assert os.path.getsize(tmp_path / "out" / "curve-one.png") > 1000
    page = open(paths["report.html"]).read()
    assert "<h2>Tables</h2>" in page and "<b>beats</b>" in page and "<li>one</li>" in page
    assert "<caption>cap</caption>" in page and "0.25" in page
    # the figure is in the page itself (JupyterLab's HTML viewer cannot fetch files beside
    # it): the same bytes as the PNG written beside report.md
    src = page.split('<img src="', 1)[1].split('"', 1)[0]
    assert src.startswith("data:image/png;base64,")
    png = (tmp_path / "out" / "curve-one.png").read_bytes()
    assert base64.b64decode(src.split(",", 1)[1]) == png
    plt.close(fig)


def test_bad_input_is_named():
    r = Report("x")
    with pytest.raises(TypeError, match="DataFrame"):
        r.table([1, 2])
    with pytest.raises(ValueError, match="level"):
        r.heading("h", level=7)
    fig = plt.figure()
    r.figure(fig, "f")
    with pytest.raises(ValueError, match="used twice"):
        r.figure(fig, "f")
    plt.close(fig)
