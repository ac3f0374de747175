"""Strip notebooks for committing: no outputs, no execution counts, no saved widget state, and
``language_info`` reduced to the language's name (the kernel rewrites it with its Python version).

    python -m fiblab.ui.nbstrip notebooks/*.ipynb        (what `make strip-notebooks` runs)
    python -m fiblab.ui.nbstrip --stdin < in.ipynb > out.ipynb

``--stdin`` is the git "clean" filter that `scripts/setup.sh` configures for the notebooks
(.gitattributes: ``filter=fiblab-nbstrip``): JupyterLab autosaves outputs into the working files,
and git stores them stripped, so what is committed (and what the tests check) has no outputs.

The kernelspec and the cells' sources and ids are kept; a file already stripped is not rewritten.
"""

from __future__ import annotations

import sys

import nbformat


def strip(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Remove outputs, execution counts and widget state from ``nb`` (in place; returned)."""
    nb.metadata.pop("widgets", None)
    lang = nb.metadata.get("language_info", {}).get("name")
    if lang:
        nb.metadata["language_info"] = {"name": lang}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in ("execution", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
    return nb


def _text(nb: nbformat.NotebookNode) -> str:
    out = nbformat.writes(strip(nb))
    return out + ("" if out.endswith("\n") else "\n")


def main(paths: list[str]) -> int:
    if paths == ["--stdin"]:  # git's clean filter: notebook on stdin, stripped on stdout
        sys.stdout.write(_text(nbformat.reads(sys.stdin.read(), as_version=4)))
        return 0
    if not paths:
        print("usage: python -m fiblab.ui.nbstrip NOTEBOOK.ipynb ...", file=sys.stderr)
        return 2
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        before = nbformat.writes(nb)
        after = _text(nb)
        if after.rstrip("\n") != before.rstrip("\n"):
            with open(path, "w", encoding="utf-8") as f:
                f.write(after)
            print(f"stripped {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
