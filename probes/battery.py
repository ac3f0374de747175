"""The auxiliary battery: RULER variable tracking, LEGO over Z/2 and associative recall, single
target, forced choice.

Both tasks are short programs of statements ``lhs = rhs ;`` in a shuffled order and a query
``var =``; the model's next-token logits at the last position, restricted to the candidate
answers, pick the answer (`probes.tasks.forced_choice_accuracy`), so chance is known exactly
(1/9 for RULER at 8 distractors, 1/2 for LEGO, 1/12 for recall among 12 pairs) and
`fiblab battery` can test a result against it.  Associative recall (the paper's §4.6: "zero for
every model") is the one-hop case of variable tracking: ``k = v ;`` for 12 keys in a shuffled
order, then ``k_q =``, the 12 values the candidates — one generator, so the two tasks share
their token layout.  The tasks, their lengths and the token layout: docs/battery.md.

    run_battery(model, vocab_size=512, seq_len=None, n=120, seed=0)
    # {"ruler_vt": {"acc": …, "acc_h2": …, "chance": 0.111, "n": 360, …}, "lego": {…}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from probes.tasks import GeneratorLike, as_generator, check_int, forced_choice_accuracy

N_SPECIAL = 7  # PAD, "=", ";", identity, flip, bit 0, bit 1
DEFAULT_ALPHABET = 200  # the paper's variable / value alphabets hold 200 ids each
HOPS = (2, 3, 4)  # RULER chain lengths (SPEC §5.3)
LEGO_LENGTHS = (2, 3, 4)  # LEGO chain lengths (SPEC §5.4)
N_DISTRACTORS = 8
ASSOC_PAIRS = (
    12,
)  # associative recall: pairs an item holds (chance 1/12; 50 tokens, as RULER at 4 hops)
_DROP = -1  # placeholder slot removed when statements are flattened


@dataclass(frozen=True)
class Alphabet:
    """The battery's token ids inside a vocabulary of ``vocab_size`` (docs/battery.md: the token layout)."""

    vocab_size: int
    first_id: int = 0
    n_vars: int | None = None  # None: min(200, room // 2)
    n_values: int | None = None

    def __post_init__(self):
        check_int("vocab_size", self.vocab_size, 1)
        check_int("first_id", self.first_id, 0)
        room = self.vocab_size - self.first_id - N_SPECIAL
        if room < 2:
            raise ValueError(
                f"vocab_size={self.vocab_size} with first_id={self.first_id} leaves "
                f"{max(room, 0)} ids after the {N_SPECIAL} special tokens; the "
                f"battery needs variables and values: raise vocab_size"
            )
        half = min(DEFAULT_ALPHABET, max(room, 0) // 2)
        if self.n_vars is None:
            object.__setattr__(self, "n_vars", half)
        if self.n_values is None:
            object.__setattr__(self, "n_values", half)
        check_int("n_vars", self.n_vars, 1, fix="the tasks need distinct variables")
        check_int("n_values", self.n_values, 1, fix="the tasks need distinct values")
        if N_SPECIAL + self.n_vars + self.n_values > self.vocab_size - self.first_id:
            raise ValueError(
                f"the battery needs {N_SPECIAL} + n_vars={self.n_vars} + n_values={self.n_values}"
                f" ids from first_id={self.first_id}, but vocab_size={self.vocab_size} leaves "
                f"{self.vocab_size - self.first_id}: raise vocab_size, lower first_id or shrink "
                f"the alphabets"
            )

    # special tokens
    @property
    def pad(self) -> int:
        return self.first_id

    @property
    def eq(self) -> int:
        return self.first_id + 1

    @property
    def semi(self) -> int:
        return self.first_id + 2

    @property
    def op_identity(self) -> int:
        return self.first_id + 3

    @property
    def op_flip(self) -> int:
        return self.first_id + 4

    @property
    def bits(self) -> tuple[int, int]:
        return self.first_id + 5, self.first_id + 6

    @property
    def var_range(self) -> tuple[int, int]:
        """[lo, hi) of the variable ids."""
        lo = self.first_id + N_SPECIAL
        return lo, lo + self.n_vars

    @property
    def value_range(self) -> tuple[int, int]:
        """[lo, hi) of the RULER value ids."""
        lo = self.var_range[1]
        return lo, lo + self.n_values


class ChoiceBatch(NamedTuple):
    x: torch.Tensor  # (B, T) int64 inputs; the last two tokens are the query "var ="
    answer: torch.Tensor  # (B,) int64 the answer's token id
    candidates: torch.Tensor  # (B, C) int64 the forced-choice token ids
    answer_index: torch.Tensor  # (B,) int64 candidates[b, answer_index[b]] == answer[b]


def ruler_vt_length(hops: int, n_distractors: int = N_DISTRACTORS) -> int:
    """Tokens in one RULER item: 4 per statement plus the 2-token query."""
    return 4 * (hops + n_distractors) + 2


def lego_length(length: int) -> int:
    """Tokens in one LEGO item: 4 for ``x0 = b ;``, 5 per ``x = op y ;``, 2 for the query."""
    return 4 + 5 * (length - 1) + 2


def assoc_recall_length(pairs: int) -> int:
    """Tokens in one associative-recall item: 4 per pair plus the 2-token query."""
    return 4 * pairs + 2


def chance(task: str, n_distractors: int = N_DISTRACTORS, pairs: int = ASSOC_PAIRS[0]) -> float:
    """Forced-choice chance level: RULER 1 / (1 + n_distractors), LEGO 1/2, recall 1 / pairs."""
    if task == "ruler_vt":
        return 1.0 / (1 + n_distractors)
    if task == "lego":
        return 0.5
    if task == "assoc_recall":
        return 1.0 / pairs
    raise ValueError(f"task={task!r} is unknown: use 'ruler_vt', 'lego' or 'assoc_recall'")


# ------------------------------------------------------------------------------------- helpers


def _distinct(n: int, k: int, lo: int, hi: int, g: torch.Generator) -> torch.Tensor:
    """(n, k) int64: per row, k distinct ids drawn uniformly from [lo, hi)."""
    return torch.rand(n, hi - lo, generator=g).argsort(1)[:, :k] + lo


def _shuffle_rows(stmts: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """stmts (B, S, w) with the S statements of each row in an independent random order."""
    B, S, w = stmts.shape
    perm = torch.rand(B, S, generator=g).argsort(1)  # (B, S)
    return stmts.gather(1, perm[..., None].expand(B, S, w))


def _pad_front(x: torch.Tensor, seq_len: int | None, pad: int) -> torch.Tensor:
    """Left-pad (B, n) to (B, seq_len) with `pad`; None keeps the item's own length."""
    n = x.shape[1]
    if seq_len is None:
        return x
    check_int("seq_len", seq_len, n, fix=f"an item needs {n} tokens: raise seq_len or pass None")
    return torch.cat([x.new_full((x.shape[0], seq_len - n), pad), x], 1)


# ------------------------------------------------------------------------------- the generators


def ruler_vt_batch(
    n: int,
    hops: int,
    alphabet: Alphabet,
    n_distractors: int = N_DISTRACTORS,
    seq_len: int | None = None,
    generator: GeneratorLike | None = None,
) -> ChoiceBatch:
    """n RULER variable-tracking items with a chain of `hops` variables (docs/battery.md)."""
    check_int("n", n, 1)
    check_int("hops", hops, 1)
    check_int("n_distractors", n_distractors, 0)
    a = alphabet
    if a.n_vars < hops + n_distractors:
        raise ValueError(
            f"hops={hops} + n_distractors={n_distractors} need as many distinct "
            f"variables but the alphabet holds n_vars={a.n_vars}: raise vocab_size "
            f"or n_vars, or lower n_distractors"
        )
    if a.n_values < 1 + n_distractors:
        raise ValueError(
            f"n_distractors={n_distractors} needs {1 + n_distractors} distinct "
            f"values but the alphabet holds n_values={a.n_values}: raise vocab_size "
            f"or n_values, or lower n_distractors"
        )
    g = as_generator(generator)
    h, m = hops, n_distractors
    var = _distinct(n, h + m, *a.var_range, g)  # (n, h+m) chain, then
    val = _distinct(n, 1 + m, *a.value_range, g)  # (n, 1+m) distractors
    lhs = var  # (n, S), S = h+m
    rhs = torch.cat([val[:, :1], var[:, : h - 1], val[:, 1:]], 1)  # (n, S)
    eq, semi = torch.full_like(lhs, a.eq), torch.full_like(lhs, a.semi)
    stmts = _shuffle_rows(torch.stack([lhs, eq, rhs, semi], 2), g)  # (n, S, 4)
    query = torch.stack([var[:, h - 1], torch.full((n,), a.eq)], 1)  # (n, 2)
    x = _pad_front(torch.cat([stmts.reshape(n, -1), query], 1), seq_len, a.pad)
    order = torch.rand(n, 1 + m, generator=g).argsort(1)  # (n, 1+m)
    candidates = val.gather(1, order)  # values, random order
    answer_index = (order == 0).long().argmax(1)  # (n,) where val[:, 0]
    return ChoiceBatch(x, val[:, 0].clone(), candidates, answer_index)


def assoc_recall_batch(
    n: int,
    pairs: int,
    alphabet: Alphabet,
    seq_len: int | None = None,
    generator: GeneratorLike | None = None,
) -> ChoiceBatch:
    """n associative-recall items of ``pairs`` key–value statements: RULER at one hop with
    ``pairs − 1`` distractor pairs (every value a candidate)."""
    check_int("pairs", pairs, 2, fix="recall needs a queried pair and another")
    return ruler_vt_batch(n, 1, alphabet, pairs - 1, seq_len, generator)


def lego_batch(
    n: int,
    length: int,
    alphabet: Alphabet,
    seq_len: int | None = None,
    generator: GeneratorLike | None = None,
) -> ChoiceBatch:
    """n LEGO items over Z/2 with a chain of `length` variables (docs/battery.md)."""
    check_int("n", n, 1)
    check_int("length", length, 1)
    a = alphabet
    if a.n_vars < length:
        raise ValueError(
            f"length={length} needs as many distinct variables but the alphabet "
            f"holds n_vars={a.n_vars}: raise vocab_size or n_vars"
        )
    g = as_generator(generator)
    L = length
    var = _distinct(n, L, *a.var_range, g)  # (n, L) x0 … x_{L−1}
    b = torch.randint(0, 2, (n,), generator=g)  # (n,) x0's bit
    flips = torch.randint(0, 2, (n, L - 1), generator=g)  # (n, L−1) 1 = flip
    bit0, _ = a.bits
    first = torch.stack(
        [
            var[:, 0],
            torch.full((n,), a.eq),
            bit0 + b,  # x0 = b ; (4 + drop)
            torch.full((n,), a.semi),
            torch.full((n,), _DROP),
        ],
        1,
    )[:, None]
    op = torch.where(flips == 1, a.op_flip, a.op_identity)  # (n, L−1)
    rest = torch.stack(
        [var[:, 1:], torch.full_like(op, a.eq), op, var[:, :-1], torch.full_like(op, a.semi)], 2
    )  # (n, L−1, 5)
    flat = _shuffle_rows(torch.cat([first, rest], 1), g).reshape(n, -1)  # (n, 5L)
    body = flat[flat != _DROP].view(n, 5 * L - 1)  # one slot per row
    query = torch.stack([var[:, -1], torch.full((n,), a.eq)], 1)  # (n, 2)
    x = _pad_front(torch.cat([body, query], 1), seq_len, a.pad)
    bit = b ^ (flips.sum(1) % 2)  # (n,) the answer
    candidates = torch.tensor(a.bits).expand(n, 2).clone()  # (n, 2) bit 0, bit 1
    return ChoiceBatch(x, bit0 + bit, candidates, bit)


# ------------------------------------------------------------------------------------- scoring


def _model_device(model, device) -> torch.device:
    if device is not None:
        return torch.device(device)
    params = getattr(model, "parameters", None)
    p = next(iter(params()), None) if callable(params) else None
    return p.device if p is not None else torch.device("cpu")


@torch.no_grad()
def last_logits(model, x: torch.Tensor, device=None, batch_size: int = 64) -> torch.Tensor:
    """(B, V) float32 next-token logits at the last position of each row of x (B, T).

    ``model(ids)`` must return ``(logits, anything)`` (FibLM returns (logits, loss)) or logits
    alone, with logits (B, T, V).  Rows are run `batch_size` at a time."""
    check_int("batch_size", batch_size, 1)
    dev = _model_device(model, device)
    out = []
    for i in range(0, x.shape[0], batch_size):
        res = model(x[i : i + batch_size].to(dev))
        logits = res[0] if isinstance(res, (tuple, list)) else res  # (b, T, V)
        if logits.dim() != 3 or logits.shape[:2] != x[i : i + batch_size].shape:
            raise ValueError(
                f"model(ids) must give logits (B, T, V) for ids "
                f"{tuple(x[i : i + batch_size].shape)}; got {tuple(logits.shape)}"
            )
        out.append(logits[:, -1].float().cpu())
    return torch.cat(out)


def score(model, batch: ChoiceBatch, device=None, batch_size: int = 64) -> float:
    """Forced-choice accuracy of `model` on a batch (argmax of the candidates' logits)."""
    logits = last_logits(model, batch.x, device, batch_size)  # (B, V)
    if int(batch.candidates.max()) >= logits.shape[1]:
        raise ValueError(
            f"candidate id {int(batch.candidates.max())} is outside the model's "
            f"{logits.shape[1]} logits: build the Alphabet with the model's vocab"
        )
    return forced_choice_accuracy(logits, batch.candidates, batch.answer_index)


def run_battery(
    model,
    vocab_size: int,
    seq_len: int | None = None,
    n: int = 120,
    seed: int = 0,
    device=None,
    *,
    hops=HOPS,
    lengths=LEGO_LENGTHS,
    n_distractors: int = N_DISTRACTORS,
    pairs=ASSOC_PAIRS,
    first_id: int = 0,
    batch_size: int = 64,
) -> dict:
    """Both tasks, `n` items per chain length, scored by forced choice in eval mode.

    Returns ``{"ruler_vt": {"acc", "acc_h<h>" per hop count, "chance", "n"},
    "lego": {"acc", "acc_L<L>" per chain length, "chance", "n"},
    "assoc_recall": {"acc", "acc_p<pairs>", "chance", "n"}}``; "acc" is over all items (recall's
    chance is 1/pairs: one size of ``pairs`` a call keeps it one number).
    ``seq_len`` left-pads every item to that length (None: each item's own length).  The batch
    for (task, chain length) is drawn from a generator seeded seed·1000 + 100·task + length
    (task 0 = RULER, 1 = LEGO, 2 = recall), so each cell is reproducible on its own."""
    check_int("seed", seed, 0)
    alphabet = Alphabet(vocab_size, first_id)
    cfg = getattr(model, "cfg", None)
    limit, model_vocab = getattr(cfg, "seq_len", None), getattr(cfg, "vocab_size", None)
    if model_vocab is not None and vocab_size > model_vocab:
        raise ValueError(
            f"vocab_size={vocab_size} exceeds the model's vocab_size={model_vocab}: "
            f"battery ids would fall outside its embedding; pass {model_vocab}"
        )
    if len({int(p) for p in pairs}) != 1:
        raise ValueError(f"pairs={tuple(pairs)!r}: give one size (recall's chance is 1/pairs)")
    longest = max(
        [ruler_vt_length(h, n_distractors) for h in hops]
        + [lego_length(L) for L in lengths]
        + [assoc_recall_length(p) for p in pairs]
        + [seq_len or 0]
    )
    if limit is not None and longest > limit:
        raise ValueError(
            f"battery items need {longest} tokens but the model's seq_len is "
            f"{limit}: rebuild it longer (model.with_seq_len({longest})) or lower "
            f"seq_len / hops / n_distractors"
        )
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        report = {}
        tasks = (("ruler_vt", hops, "h"), ("lego", lengths, "L"), ("assoc_recall", pairs, "p"))
        for t, (task, sizes, tag) in enumerate(tasks):
            if not sizes:  # a task asked for at no size is left out (one task alone: recall)
                continue
            cells, total = {}, 0.0
            for size in sizes:
                g = torch.Generator().manual_seed(seed * 1000 + 100 * t + size)
                if task == "ruler_vt":
                    batch = ruler_vt_batch(n, size, alphabet, n_distractors, seq_len, g)
                elif task == "lego":
                    batch = lego_batch(n, size, alphabet, seq_len, g)
                else:
                    batch = assoc_recall_batch(n, size, alphabet, seq_len, g)
                acc = score(model, batch, device, batch_size)
                cells[f"acc_{tag}{size}"] = acc
                total += acc * n
            report[task] = {
                "acc": total / (n * len(sizes)),
                **cells,
                "chance": chance(task, n_distractors, sizes[0]),
                "n": n * len(sizes),
            }
        return report
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
