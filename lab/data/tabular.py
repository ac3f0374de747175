"""Documents from record files, one document per row with its text in one field: .jsonl and
.jsonl.gz (one JSON object a line), .parquet (read batch by batch) and Arrow IPC files as
`datasets.Dataset.save_to_disk` writes them (data-*.arrow in the stream format; the random-access
file format is read too, and `arrow_dataset_files` lists a saved folder's shards in order).

The standard library and pyarrow only: `datasets` is never imported and nothing is downloaded.
A missing (None) value is skipped; a value that is not text is refused. Every error names the
file and what to do.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

_BATCH_ROWS = 4096  # parquet rows per read


# ------------------------------------------------------------------------------------ jsonl


def is_gzip(path: Path) -> bool:
    return path.name.lower().endswith(".gz")


def jsonl_documents(path: Path, fld: str) -> Iterator[str]:
    """The `fld` value of every line of a .jsonl or .jsonl.gz file (blank lines skipped)."""
    try:
        f = (
            gzip.open(path, "rt", encoding="utf-8")
            if is_gzip(path)
            else open(path, encoding="utf-8")
        )
    except OSError as e:
        raise ValueError(f"source file {str(path)!r} cannot be read ({e.strerror or e})") from None
    with f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(
                        f"{str(path)!r} line {lineno} is not JSON ({e.msg}); "
                        f"write one JSON object per line"
                    ) from None
                if not isinstance(row, dict) or fld not in row:
                    keys = sorted(row) if isinstance(row, dict) else type(row).__name__
                    raise ValueError(
                        f"{str(path)!r} line {lineno} has no field {fld!r} (found "
                        f"{keys}); name the text field as {path.name}:FIELD"
                    )
                value = row[fld]
                if value is None:
                    continue
                if not isinstance(value, str):
                    raise ValueError(
                        f"{str(path)!r} line {lineno}: field {fld!r} is a "
                        f"{type(value).__name__}, not text; pick a text field"
                    )
                yield value
        except UnicodeDecodeError as e:
            raise ValueError(
                f"source file {str(path)!r} is not valid UTF-8 (near line "
                f"{lineno + 1}, byte {e.start}); convert it to UTF-8"
            ) from None
        except (EOFError, OSError) as e:  # gzip.BadGzipFile is an OSError
            if not is_gzip(path):
                raise ValueError(
                    f"source file {str(path)!r} cannot be read ({getattr(e, 'strerror', '') or e})"
                ) from None
            raise ValueError(
                f"source file {str(path)!r} is not a complete gzip file ({e}); compress it "
                f"again (gzip x.jsonl) or give the plain .jsonl"
            ) from None


def check_jsonl_field(path: Path, fld: str) -> None:
    """Read the first row only: it must have `fld` (or the file must be empty)."""
    first = jsonl_documents(path, fld)
    try:
        next(first, None)
    finally:
        first.close()


# ------------------------------------------------------------------------------------ parquet


def _pyarrow(what: str):
    try:
        import pyarrow

        return pyarrow
    except ImportError:
        raise ValueError(f"reading {what} needs pyarrow: pip install pyarrow") from None


def parquet_columns(path: Path) -> list[str]:
    _pyarrow(".parquet")
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except Exception as e:  # corrupt / not parquet
        raise ValueError(
            f"source file {str(path)!r} is not a readable parquet file ({e})"
        ) from None


def parquet_documents(path: Path, col: str) -> Iterator[str]:
    _pyarrow(".parquet")
    import pyarrow.parquet as pq

    batches = (
        b.column(0).to_pylist()
        for b in pq.ParquetFile(path).iter_batches(columns=[col], batch_size=_BATCH_ROWS)
    )
    yield from texts(batches, f"parquet column {col!r} of {str(path)!r}")


# ------------------------------------------------------------------------------------ arrow


def _arrow_batches(path: Path) -> Iterator:
    """The record batches of an Arrow IPC file: the stream format (what `datasets` writes),
    else the file format."""
    pa = _pyarrow("Arrow files")
    try:
        with pa.memory_map(str(path)) as src:
            try:
                reader = pa.ipc.open_stream(src)
            except pa.ArrowInvalid:
                src.seek(0)
                reader = pa.ipc.open_file(src)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)
                return
            yield from reader
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(
            f"source file {str(path)!r} is not a readable Arrow IPC file ({e}); give a "
            f"folder written by datasets' save_to_disk, or re-save it"
        ) from None


def arrow_columns(path: Path) -> list[str]:
    pa = _pyarrow("Arrow files")
    try:
        with pa.memory_map(str(path)) as src:
            try:
                return list(pa.ipc.open_stream(src).schema.names)
            except pa.ArrowInvalid:
                src.seek(0)
                return list(pa.ipc.open_file(src).schema.names)
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(
            f"source file {str(path)!r} is not a readable Arrow IPC file ({e}); give a "
            f"folder written by datasets' save_to_disk, or re-save it"
        ) from None


def arrow_documents(path: Path, col: str) -> Iterator[str]:
    batches = (b.column(col).to_pylist() for b in _arrow_batches(path))
    yield from texts(batches, f"Arrow column {col!r} of {str(path)!r}")


def arrow_dataset_files(folder: Path) -> list[Path]:
    """The shards of a `save_to_disk` folder in their order: state.json's "_data_files"
    (each {"filename": …}), else every *.arrow file by name."""
    state = folder / "state.json"
    if not state.is_file():
        return sorted(folder.glob("*.arrow"))
    try:
        names = [d["filename"] for d in json.loads(state.read_text())["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{str(state)!r} is not a datasets state.json (no _data_files list: {e}); "
            f"re-save the dataset with save_to_disk"
        ) from None
    files = [folder / n for n in names]
    missing = [n for n, f in zip(names, files) if not f.is_file()]
    if missing or not files:
        raise ValueError(
            f"Arrow dataset folder {str(folder)!r} lacks its data files {missing or names}; "
            f"copy the whole folder written by save_to_disk"
        )
    return files


# ------------------------------------------------------------------------------------ helpers


def columns(kind: str, path: Path) -> list[str]:
    """The field names of one parquet or Arrow file."""
    return parquet_columns(path) if kind == "parquet" else arrow_columns(path)


def texts(batches: Iterable[list], what: str) -> Iterator[str]:
    """The values of column batches, None skipped; ValueError on a value that is not text."""
    for batch in batches:
        for value in batch:
            if value is None:
                continue
            if not isinstance(value, str):
                raise ValueError(
                    f"{what} holds {type(value).__name__} values, not text; pick a text column"
                )
            yield value
