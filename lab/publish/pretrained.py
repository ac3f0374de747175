"""A trained model as a folder that needs nothing of the lab's training side: `save_pretrained`
writes it, `from_pretrained` reads it back with no data, no optimizer and no checkpoint.

    DIR/config.json        {"fiblab_format": 1, "model": <ModelConfig>, "card": <ModelCard>}
    DIR/model.safetensors  the weights (safetensors; the tied embedding / lm_head stored once;
                           a learned schedule's θ among them, so α round-trips exactly)
    DIR/tokenizer.json     the tokenizer, when one was given (`load_tokenizer`)
    DIR/README.md          a short model card (`card_text`)

    save_pretrained(model, "models/stagger", tokenizer=tok, card=ModelCard(data="bible"))
    model = from_pretrained("models/stagger")          # FibLM, eval mode, on "cpu"
    tok = load_tokenizer("models/stagger")             # lab.data.tokenizer.BPETokenizer

`fiblab export RUN --out DIR` writes one from a run folder (`lab.publish.export`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.data.tokenizer import BPETokenizer
from lab.lm.model import FibLM
from lab.lm.modelconfig import ModelConfig
from lab.lm.typedconfig import config_from_dict
from lab.util import jsonio
from lab.util.files import atomic_path

FORMAT_KEY = "fiblab_format"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
CARD_FILE = "README.md"


@dataclass(frozen=True)
class ModelCard:
    """What the card says besides the model itself; None: unknown (the line says so)."""

    name: str | None = None  # the run's name
    data: str | None = None  # the training data source spec (lab.data)
    steps: int | None = None  # optimizer steps the weights have seen
    total_steps: int | None = None  # steps the run was configured for
    perplexity: dict[str, float] = field(default_factory=dict)  # held-out domain -> ppl
    context_len: int | None = None  # length the perplexity was measured at

    @classmethod
    def from_dict(cls, d) -> ModelCard:
        d = dict(d or {})
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["perplexity"] = {str(k): float(v) for k, v in (known.get("perplexity") or {}).items()}
        return cls(**known)


# --------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------
def save_pretrained(
    model: FibLM,
    out_dir: str | os.PathLike,
    tokenizer: BPETokenizer | str | os.PathLike | None = None,
    card: ModelCard | dict | None = None,
) -> Path:
    """Write `model` (and the tokenizer, a card) to out_dir; returns out_dir.  An existing
    save there is replaced; a folder holding another config.json (a run folder) is refused."""
    from safetensors.torch import save_model

    if not isinstance(model, FibLM):
        raise ValueError(f"save_pretrained takes a FibLM, not {type(model).__name__}")
    out = Path(out_dir)
    _check_target(out)
    card = card if isinstance(card, ModelCard) else ModelCard.from_dict(card)
    tok_text = _tokenizer_text(tokenizer, model.cfg.vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / WEIGHTS_FILE) as tmp:
        save_model(model, str(tmp), metadata={"format": "pt"})
    tok_path = out / TOKENIZER_FILE
    if tok_text is not None:
        with atomic_path(tok_path) as tmp:
            tmp.write_text(tok_text, encoding="utf-8")
    elif tok_path.exists():
        tok_path.unlink()  # a stale tokenizer of an earlier save would not match these weights
    with atomic_path(out / CARD_FILE) as tmp:
        tmp.write_text(
            card_text(model, card, tokenizer=tok_text is not None, where=str(out)), encoding="utf-8"
        )
    doc = {
        FORMAT_KEY: FORMAT_VERSION,
        "model": model.cfg.to_dict(),
        "alphas": model.alphas(),  # informative: the weights (θ) or the schedule hold them
        "card": asdict(card),
    }
    with atomic_path(out / CONFIG_FILE) as tmp:  # written last: a folder with it is complete
        tmp.write_text(jsonio.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    return out


def _check_target(out: Path) -> None:
    check_target(out, lambda doc: FORMAT_KEY in doc, "save")


def check_target(out: Path, ours: Callable[[dict], bool], what: str) -> None:
    """Refuse an ``out`` that saving would damage: a file, a folder holding a config.json that
    ``ours`` does not recognise (a run folder, another kind of model), or a folder with files
    but no config.json (the user's own files, whose names a save may share — README.md,
    tokenizer.json).  An earlier save of the same kind is replaced.  ``what`` names it."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"{str(out)!r} is a file: give a folder to save the model in")
    cfg = out / CONFIG_FILE
    if cfg.is_file():
        try:
            doc = json.loads(cfg.read_text(encoding="utf-8"))
            mine = isinstance(doc, dict) and ours(doc)
        except (OSError, ValueError, TypeError):
            mine = False
        if not mine:
            raise ValueError(
                f"{str(out)!r} holds another {CONFIG_FILE} (a run folder or another model): "
                f"choose an empty folder to save the model in"
            )
    elif out.is_dir() and any(out.iterdir()):
        names = sorted(p.name for p in out.iterdir())
        shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
        raise ValueError(
            f"{str(out)!r} holds files but no earlier {what} ({shown}): choose an empty or new "
            f"folder to save the model in"
        )


def _tokenizer_text(tokenizer, vocab_size: int) -> str | None:
    if tokenizer is None:
        return None
    tok = tokenizer if isinstance(tokenizer, BPETokenizer) else BPETokenizer.load(tokenizer)
    if tok.vocab_size > vocab_size:
        raise ValueError(
            f"the tokenizer has {tok.vocab_size} ids but the model's vocab_size is "
            f"{vocab_size}: give the tokenizer the model was trained with"
        )
    return tok.to_str()


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------
def is_pretrained(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder written by `save_pretrained` (its config.json says so)."""
    cfg = Path(path) / CONFIG_FILE
    try:
        return FORMAT_KEY in json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def read_config(path: str | os.PathLike) -> dict:
    """The checked config.json of a save_pretrained folder (format and version)."""
    d = Path(path)
    cfg = d / CONFIG_FILE
    if not d.is_dir():
        raise ValueError(f"model folder {str(d)!r} does not exist: give a save_pretrained folder")
    try:
        doc = json.loads(cfg.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(
            f"{cfg} is missing: {str(d)!r} is not a save_pretrained folder (write one with "
            f"fiblab.save_pretrained(model, dir) or fiblab export RUN --out DIR)"
        ) from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{cfg} is unreadable ({e}): save the model again") from None
    if not isinstance(doc, dict) or FORMAT_KEY not in doc:
        hint = (
            " (a Hugging Face export? load it with lab.publish.hf)" if isinstance(doc, dict) else ""
        )
        raise ValueError(
            f"{cfg} has no {FORMAT_KEY!r} entry: {str(d)!r} is not a fiblab save_pretrained "
            f"folder{hint}"
        )
    if doc[FORMAT_KEY] != FORMAT_VERSION:
        raise ValueError(
            f"{cfg} is format version {doc[FORMAT_KEY]!r}; this fiblab reads version "
            f"{FORMAT_VERSION}: load it with the fiblab that wrote it, or save it again"
        )
    return doc


def from_pretrained(path: str | os.PathLike, device="cpu") -> FibLM:
    """The model of a save_pretrained folder, in eval mode on `device`: config.json and
    model.safetensors only (no data, no optimizer)."""
    from safetensors.torch import load_model

    d = Path(path)
    doc = read_config(d)
    cfg = config_from_dict(doc.get("model") or {}, ModelConfig, source=str(d / CONFIG_FILE))
    weights = d / WEIGHTS_FILE
    if not weights.is_file():
        raise ValueError(f"{weights} is missing: save the model again (model.save_pretrained)")
    model = FibLM(cfg)
    try:
        load_model(model, str(weights), strict=True)
    except Exception as e:  # RuntimeError (keys, shapes) or a SafetensorError (a damaged file)
        first = str(e).strip().splitlines()
        why = " ".join(line.strip() for line in first[:3])
        raise ValueError(
            f"{weights} does not fit {d / CONFIG_FILE} ({why}): the two files come from "
            f"different models or one is damaged; save the model again"
        ) from None
    return model.to(device).eval()


def load_tokenizer(path: str | os.PathLike) -> BPETokenizer:
    """The tokenizer saved beside the model (save_pretrained's tokenizer=, or a run folder)."""
    tok = Path(path) / TOKENIZER_FILE
    if not tok.is_file():
        raise ValueError(
            f"{tok} is missing: the model in {str(path)!r} was saved without a tokenizer; "
            f"save it again with tokenizer= (a run trained on token .bin files has none)"
        )
    return BPETokenizer.load(tok)


def read_card(path: str | os.PathLike) -> ModelCard:
    """The card entry of a save_pretrained folder's config.json."""
    return ModelCard.from_dict(read_config(path).get("card"))


# --------------------------------------------------------------------------------------------
# the model card
# --------------------------------------------------------------------------------------------
def _attention_line(cfg: ModelConfig) -> str:
    if cfg.attention == "dense":
        return "dense causal attention (the baseline)"
    names = {"fib": f"{cfg.rungs} Fibonacci", "pow2": "power-of-2"}
    base = names.get(cfg.base) if isinstance(cfg.base, str) else None
    base = base or "custom (" + ",".join(map(str, cfg.base)) + ")"
    sched = cfg.schedule if isinstance(cfg.schedule, str) else "per-layer list"
    if cfg.learned:
        init = cfg.learned_init if isinstance(cfg.learned_init, str) else "a list"
        sched = f"learned (from {init})"
    return f"sparse: window W={cfg.window} + {base} rungs scaled by α, schedule {sched}"


def card_text(model: FibLM, card: ModelCard, *, tokenizer: bool = True, where: str = "DIR") -> str:
    """The README.md of a save_pretrained folder: what the model is and how to load it."""
    cfg = model.cfg
    alphas = model.alphas()
    alpha = "–" if all(math.isnan(a) for a in alphas) else " ".join(f"{a:.4f}" for a in alphas)
    steps = "unknown" if card.steps is None else f"{card.steps:,}"
    if card.steps is not None and card.total_steps is not None:
        steps += f" of {card.total_steps:,}"
    ctx = f" at T={card.context_len}" if card.context_len else ""
    ppl = (
        ", ".join(f"{k} {v:.3f}" for k, v in card.perplexity.items()) + ctx
        if card.perplexity
        else "not recorded"
    )
    title = card.name or "a fiblab model"
    kind = "dense attention" if cfg.attention == "dense" else "sparse attention"
    rows = [
        ("attention", _attention_line(cfg)),
        ("per-layer α", alpha),
        (
            "size",
            f"d={cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads "
            f"({cfg.n_kv_heads} KV), vocab {cfg.vocab_size}, context {cfg.seq_len}",
        ),
        ("parameters", f"{model.num_params():,} (embedding tied to the output)"),
        ("data", card.data or "unknown"),
        ("steps", steps),
        ("held-out perplexity", ppl),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    tok_lines = (
        "tok = fiblab.load_tokenizer(DIR)\n"
        'ids = torch.tensor([tok.encode("In the beginning")])\n'
        "out = model.generate(ids, 40, temperature=0.8, top_k=50, seed=0)\n"
        "print(tok.decode(out[0]))\n"
        if tokenizer
        else "# saved without a tokenizer: feed token ids\n"
    )
    return (
        f"# {title}\n\n"
        f"A decoder-only language model ({kind}), written by fiblab's "
        "`save_pretrained` (config.json, model.safetensors"
        + (", tokenizer.json" if tokenizer else "")
        + ").\n\n| | |\n|---|---|\n"
        + table
        + "\n\n## Loading\n\n```python\nimport torch\nimport fiblab\n\n"
        f'DIR = "{where}"\nmodel = fiblab.from_pretrained(DIR)  # FibLM, eval mode\n'
        + tok_lines
        + "```\n"
        + (
            f'\nor from the shell: `fiblab sample {where} --prompt "In the beginning"`.\n'
            if tokenizer
            else ""
        )
    )
