"""JSON-lines results files: rows appended whole, a torn line skipped, never a whole row lost."""

import json

from lab.util import jsonio


def test_rows_round_trip_and_a_missing_file_reads_empty(tmp_path):
    p = str(tmp_path / "rows.jsonl")
    assert jsonio.read_rows(p) == []
    jsonio.append_row(p, {"a": 1, "x": float("nan")})
    jsonio.append_row(p, {"b": [1, 2]})
    assert jsonio.read_rows(p) == [{"a": 1, "x": None}, {"b": [1, 2]}]
    assert [json.loads(x) for x in open(p)] == jsonio.read_rows(p)


def test_a_torn_last_line_is_left_out(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text('{"a": 1}\n{"b": 2}\n{"c": ')
    assert jsonio.read_rows(str(p)) == [{"a": 1}, {"b": 2}]


def test_a_row_appended_after_a_torn_line_stands_alone(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text('{"a": 1}\n{"b": ')
    jsonio.append_row(str(p), {"c": 3})
    assert jsonio.read_rows(str(p)) == [{"a": 1}, {"c": 3}]
