"""The lab's progress bars are tqdm's: tokenising shows bytes/s with documents and tokens, a BPE
shows the text it reads, a probe cell shows its cell, steps, loss and time; quiet means nothing
on stderr; `on_step` callbacks (what the notebooks follow) are called as before."""

from dataclasses import replace

import pytest
from tqdm import tqdm

from lab.data.prepared import prepare
from probes.runner import cell_label, run_cell
from probes.settings import SCALES, Cell


def corpus(tmp_path, n=30):
    words = "one two three four five six seven eight nine ten".split()
    text = "".join(f"{' '.join(words[(i + j) % 10] for j in range(40))}\n" for i in range(n))
    (tmp_path / "t.txt").write_text(text)
    return tmp_path / "t.txt", len(text.encode())


def test_tokenising_shows_bytes_per_second_docs_and_tokens(tmp_path, capsys):
    path, size = corpus(tmp_path)
    data = prepare(str(path), vocab_size=300, cache_dir=tmp_path / "c", progress=True)
    err = capsys.readouterr().err
    assert "BPE t: reading text" in err  # the trainer's input
    assert "tokenising t" in err and "B/s" in err and "docs=1" in err
    assert f"tokens={data.meta['n_tokens']:,}" in err
    total = tqdm.format_sizeof(size, divisor=1000)  # a text file's total is known: 100 % of it
    assert f"100%|██████████| {total}/{total}" in err
    again = prepare(str(path), vocab_size=300, cache_dir=tmp_path / "c", progress=True)
    assert again.reused and capsys.readouterr().err == ""  # nothing tokenised, no bar


def test_quiet_preparation_prints_nothing(tmp_path, capsys):
    path, _ = corpus(tmp_path)
    prepare(str(path), vocab_size=300, cache_dir=tmp_path / "c")  # progress=False by default
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("progress", [True, False])
def test_probe_cell_bar_and_on_step(capsys, progress):
    settings = replace(SCALES["tiny"], steps=30)
    cell = Cell("dense", 2, "-", 0)
    seen = []
    run_cell(cell, settings, progress=progress, on_step=lambda *a: seen.append(a[1:4]))
    err = capsys.readouterr().err
    assert [s[0] for s in seen] == [1, 26, 30] and all(s[1] == 30 for s in seen)
    if not progress:
        assert err == ""
        return
    assert cell_label(cell) == "      dense depth 2 -         seed 0"
    final = err.replace("\r", "\n").strip().splitlines()[-1]
    assert final.startswith(cell_label(cell)) and "30/30" in final  # steps done / total
    assert f"loss={seen[-1][2]:.3f}" in final and "step/s" in final or "s/step" in final
