"""One typed config layer: overrides and configs read back from JSON, by each field's type.

Every value is read by the declared type of its dataclass field (``typing.get_type_hints``), so
`lab.training.trainconfig.TrainConfig`, `lab.lm.modelconfig.ModelConfig` and any other config dataclass share one rule:

    int, float, bool, str           12 · 3e-4 · true/false · text
    X | None                        none / null -> None
    tuple[float, float]             betas=0.9,0.95 (a fixed length: another one is an error)
    tuple[float, ...], list[int]    comma lists of any length
    str | tuple                     a name or a comma list: schedule=stagger, schedule=0.6,1.4
    Enum, Literal, choice fields    one of the allowed values (the error lists them)
    a nested dataclass              its fields as section.field: model.window=12

Bad input is one ValueError line naming the key, the value and what is allowed, e.g.
``--override model.window=abc: window must be an integer (e.g. model.window=8)``; an unknown
key suggests the nearest field.  `config_from_dict` rebuilds a config from its JSON dict (JSON
turns tuples into lists) with the same checks.

One module of ≈ 470 lines on purpose: the reading of overrides and of JSON back into configs is
one rule by field type, with one error wording; split, the two readers would drift apart.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import json
import numbers
import types
import typing
from collections.abc import Mapping

from lab.ladder import offsets, schedules
from lab.lm.modelconfig import ATTENTIONS, PATHS, RUNG_POLICIES, ModelConfig

# str fields whose allowed values the core defines (class -> field -> names); Enum / Literal
# annotations and a field's metadata["choices"] need no entry here
FIELD_CHOICES: dict[type, dict[str, tuple]] = {
    ModelConfig: {
        "attention": ATTENTIONS,
        "rounding": offsets.ROUNDINGS,
        "path": PATHS,
        "rung_policy": RUNG_POLICIES,
        "base": ("fib", "pow2"),
        "schedule": schedules.SCHEDULES,
        "learned_init": tuple(s for s in schedules.SCHEDULES if s != "learned"),
    },
}
# names accepted as well but not listed (lab.ladder.schedules' older spellings)
FIELD_ALIASES: dict[type, dict[str, tuple]] = {
    ModelConfig: {"schedule": ("linear", "hdc"), "learned_init": ("linear", "hdc")},
}
# what an unknown key "names no … field" of
_LABELS = {"TrainConfig": "training", "ModelConfig": "model"}
NONE_WORDS = ("none", "null")
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


class _Mismatch(Exception):
    """A value that does not fit a type; ``what`` completes "<field> must be …"."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


# --------------------------------------------------------------------------------------------
# fields
# --------------------------------------------------------------------------------------------
@functools.cache
def field_types(cls: type) -> dict[str, object]:
    """{field name: resolved type} of a config dataclass (init fields only)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _field(cls: type, name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def choices(cls: type, name: str) -> tuple[tuple, tuple]:
    """(listed, accepted) names of a str field of ``cls``; ((), ()) when it takes any text."""
    meta = _field(cls, name).metadata.get("choices")
    listed = tuple(meta) if meta is not None else FIELD_CHOICES.get(cls, {}).get(name, ())
    return listed, listed + FIELD_ALIASES.get(cls, {}).get(name, ())


def _default(cls: type, name: str):
    f = _field(cls, name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _is_section(tp) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _union_args(tp) -> tuple | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return None


# --------------------------------------------------------------------------------------------
# text -> value
# --------------------------------------------------------------------------------------------
def _one_of(names) -> str:
    return "one of " + ", ".join(str(n) for n in names)


def _describe(tp, listed: tuple) -> str:
    """A noun phrase for what a value of ``tp`` looks like."""
    args = _union_args(tp)
    if args is not None:
        parts = [_describe(a, listed) for a in args if a is not type(None)]
        if type(None) in args:
            parts.append("none")
        return " or ".join(parts)
    origin, targs = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return _one_of(listed) if listed else "text"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _one_of(m.value for m in tp)
    if origin is typing.Literal:
        return _one_of(targs)
    if tp in (tuple, list) or origin in (tuple, list):
        if origin is tuple and targs and targs[-1] is not Ellipsis:
            return f"{len(targs)} comma-separated {_plural(targs[0])}"
        elem = targs[0] if targs else None
        return f"a comma list of {_plural(elem)}"
    return getattr(tp, "__name__", str(tp))


def _plural(tp) -> str:
    return {int: "integers", float: "numbers", str: "names", bool: "true/false values"}.get(
        tp, "numbers"
    )


def _convert(tp, value, listed: tuple = (), accepted: tuple = ()):
    """``value`` as type ``tp``: text (an override) is parsed, a Python / JSON value is checked
    (JSON lists become tuples).  ``listed`` / ``accepted``: a str field's names.  Raises
    _Mismatch."""
    text = value.strip() if isinstance(value, str) else None
    args = _union_args(tp)
    if args is not None:
        if type(None) in args and (value is None or (text or "").lower() in NONE_WORDS):
            return None
        for alt in sorted((a for a in args if a is not type(None)), key=lambda a: a is str):
            try:  # a comma list before a name
                return _convert(alt, value, listed, accepted)
            except _Mismatch:
                pass
        raise _Mismatch(_describe(tp, listed))
    origin, targs = typing.get_origin(tp), typing.get_args(tp)
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if text is not None and text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
    elif tp is int:
        if real and isinstance(value, numbers.Integral):
            return int(value)
        if text is not None:
            try:
                return int(text)
            except ValueError:
                f = _float(text)  # 1e4 is an integer too
                if f is not None and f.is_integer():
                    return int(f)
    elif tp is float:
        if real:
            return float(value)
        if text is not None and _float(text) is not None:
            return _float(text)
    elif tp is str:
        if text is not None and (not accepted or text in accepted):
            return text if accepted else value
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        want = text if text is not None else value
        for m in tp:
            if want is m or want == m.value or str(want).lower() in (m.name.lower(), str(m.value)):
                return m
    elif origin is typing.Literal:
        for a in targs:
            if value == a or (text is not None and text.lower() == str(a).lower()):
                return a
    elif tp in (tuple, list) or origin in (tuple, list):
        if text is not None:
            items = [p.strip() for p in text.split(",")] if text else []
        else:
            items = list(value) if isinstance(value, (list, tuple)) else None
        if items is not None:
            fixed = origin is tuple and targs and targs[-1] is not Ellipsis
            if fixed and len(items) != len(targs):
                raise _Mismatch(f"{_describe(tp, listed)}, got {len(items)}")
            elems = targs if fixed else [targs[0] if targs else None] * len(items)
            try:
                out = [_element(e, v) for e, v in zip(elems, items)]
            except _Mismatch:
                raise _Mismatch(_describe(tp, listed)) from None
            return out if (tp is list or origin is list) else tuple(out)
    elif _is_section(tp):
        if isinstance(value, tp):
            return value
    else:  # a type this layer does not read: kept as given
        return value
    raise _Mismatch(_describe(tp, listed))


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _element(tp, value):
    """One element of a sequence; an untyped one (bare ``tuple``) is a number, an int when
    written as one (base=1,3,9) and a float otherwise (0.6,1.4)."""
    if tp is not None:
        return _convert(tp, value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            if _float(value) is not None:
                return _float(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        return value
    raise _Mismatch("a number")


# --------------------------------------------------------------------------------------------
# value -> text
# --------------------------------------------------------------------------------------------
def format_value(value) -> str:
    """The override text of a value (the inverse of parsing: 0.9,0.95 · none · true)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (tuple, list)):
        return ",".join(format_value(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _show(value) -> str:
    return value if isinstance(value, str) else format_value(value)


# --------------------------------------------------------------------------------------------
# keys and overrides
# --------------------------------------------------------------------------------------------
def split_overrides(items) -> dict:
    """{key: value} from ``--override`` items: "key=value" strings (a list, or one text with one
    per line, '#' comments), or a dict (copied; values may already be typed).  A key given
    twice with different values is refused (ValueError naming both)."""
    if items is None:
        return {}
    if isinstance(items, Mapping):
        return {str(k).strip(): v for k, v in items.items()}
    lines = items.splitlines() if isinstance(items, str) else list(items)
    out = {}
    for item in lines:
        item = item.strip()
        if not item or item.startswith("#"):
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"override {item!r}: write key=value, e.g. lr=5e-4 or model.window=12")
        key, value = key.strip(), value.strip()
        if key in out and out[key] != value:  # the last one used to win, silently
            raise ValueError(
                f"{key} is given twice: {key}={out[key]} and {key}={value}; give it once"
            )
        out[key] = value
    return out


def with_fields(overrides: dict, fields: dict) -> dict:
    """``overrides`` with the form's or command line's own fields (``steps``, ``name``, … —
    None or "" for unset) added.  A key given both ways with different values is refused
    (ValueError naming both): before, the field won silently, so ``--override steps=-3`` beside
    a steps box was neither used nor checked."""
    out = dict(overrides)
    for key, value in fields.items():
        if value is None or value == "":
            continue
        if key in out and str(out[key]).strip() != str(value).strip():
            raise ValueError(
                f"{key} is given twice: {key}={value} and the override {key}={out[key]}; "
                f"give it once"
            )
        out[key] = value
    return out


def _unknown(cls: type, name: str, key: str, value, prefix: str, section: str) -> ValueError:
    names = list(field_types(cls))
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    label = _LABELS.get(cls.__name__, cls.__name__)
    subs = [n for n, t in field_types(cls).items() if _is_section(t)]
    if close:
        hint = f"did you mean {section}{close[0]}?"
    else:
        plain = [n for n in names if n not in subs]
        hint = f"use one of {', '.join(plain)}" + "".join(f" or {s}.<field>" for s in subs)
    return ValueError(f"{prefix}{key}={_show(value)}: {name!r} names no {label} field; {hint}")


def _typed(cls: type, path: list[str], key: str, value, prefix: str, section: str = "") -> object:
    """The typed value for the field at ``path`` inside ``cls`` (key as written, for errors)."""
    name, rest = path[0], path[1:]
    types_ = field_types(cls)
    if name not in types_:
        raise _unknown(cls, name, key, value, prefix, section)
    tp = types_[name]
    if _is_section(tp):
        if not rest:
            raise ValueError(
                f"{prefix}{key}={_show(value)}: {name} is a section; set its fields as "
                f"{section}{name}.<field>=value"
            )
        return _typed(tp, rest, key, value, prefix, f"{section}{name}.")
    if rest:
        raise _unknown(cls, ".".join(path), key, value, prefix, section)
    listed, accepted = choices(cls, name)
    try:
        return _convert(tp, value, listed, accepted)
    except _Mismatch as e:
        default = _default(cls, name)
        example = ""
        if default is not None and not e.what.startswith("one of"):
            example = f" (e.g. {section}{name}={format_value(default)})"
        raise ValueError(
            f"{prefix}{key}={_show(value)}: {name} must be {e.what}{example}"
        ) from None


def typed_overrides(cls: type, overrides, *, prefix: str = "--override ") -> dict[str, object]:
    """{dotted key: typed value} of ``overrides`` (see `split_overrides`) for config class
    ``cls``: every key checked, every value parsed by its field's type; a dict value for a
    section (model={...}) spreads into its fields."""
    out: dict[str, object] = {}
    for key, value in split_overrides(overrides).items():
        path = key.split(".")
        tp = field_types(cls).get(path[0])
        if len(path) == 1 and _is_section(tp) and isinstance(value, Mapping):
            for k, v in typed_overrides(tp, value, prefix=prefix).items():
                out[f"{key}.{k}"] = v
            continue
        if len(path) == 1 and _is_section(tp) and isinstance(value, tp):
            out[key] = value
            continue
        out[key] = _typed(cls, path, key, value, prefix)
    return out


def apply_overrides(cfg, overrides, *, prefix: str = "--override "):
    """A copy of the config dataclass ``cfg`` with ``overrides`` applied (dotted keys reach
    nested sections); the result is validated by the dataclasses themselves, and their error
    names the overrides that led to it."""
    typed = typed_overrides(type(cfg), overrides, prefix=prefix)
    return _replace(cfg, typed, "", prefix)


def _replace(cfg, typed: dict[str, object], section: str, prefix: str):
    here: dict[str, object] = {}
    nested: dict[str, dict[str, object]] = {}
    for key, value in typed.items():
        head, dot, rest = key.partition(".")
        if dot:
            nested.setdefault(head, {})[rest] = value
        else:
            here[head] = value
    for head, sub in nested.items():
        inner = here.get(head, getattr(cfg, head))
        here[head] = _replace(inner, sub, f"{section}{head}.", prefix)
    leaves = {k: v for k, v in here.items() if k not in nested}
    try:
        return dataclasses.replace(cfg, **here)
    except ValueError as e:
        named = {k: v for k, v in leaves.items() if f"{k}=" in str(e)} or leaves  # the culprit
        if len(named) == 1 and str(e).startswith(f"{next(iter(named))}="):  # it names it first
            raise ValueError(f"{prefix}{section}{e}") from None  # once: "--override steps=-3 …"
        shown = " ".join(f"{section}{k}={format_value(v)}" for k, v in named.items())
        raise ValueError(f"{prefix}{shown}: {e}" if shown else str(e)) from None


# --------------------------------------------------------------------------------------------
# configs from JSON
# --------------------------------------------------------------------------------------------
def config_from_dict(d: Mapping, cls: type, *, source: str = "config"):
    """Rebuild a config dataclass ``cls`` (`lab.training.trainconfig.TrainConfig`,
    `lab.lm.modelconfig.ModelConfig`, …) from its dict (``asdict`` / config.json: tuples came
    back as lists).  Fields missing from ``d`` keep their defaults; a field the class does not
    know is an error (the file was written by another fiblab version)."""
    # the store's copy of a run's config adds what training recorded (lab.store.variant.provenance)
    d = {k: v for k, v in d.items() if k != "provenance"}
    return _from_dict(cls, d, source, "")


def _from_dict(cls: type, d: Mapping, source: str, section: str):
    if not isinstance(d, Mapping):
        raise ValueError(
            f"{source}: {section.rstrip('.') or 'the config'} must be a JSON object of "
            f"{cls.__name__} fields, not {type(d).__name__}"
        )
    types_ = field_types(cls)
    unknown = sorted(set(d) - set(types_))
    if unknown:
        raise ValueError(
            f"{source} has fields {[section + u for u in unknown]} that {cls.__name__} does "
            f"not know: it was written by another fiblab version"
        )
    kwargs = {}
    for name, value in d.items():
        tp = types_[name]
        if _is_section(tp) and isinstance(value, Mapping):
            kwargs[name] = _from_dict(tp, value, source, f"{section}{name}.")
        elif _is_section(tp) and isinstance(value, tp):
            kwargs[name] = value
        else:
            kwargs[name] = _typed(cls, [name], section + name, value, f"{source}: ", section)
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


def read_config(path: str, cls: type):
    """The config dataclass ``cls`` in a JSON file (a run's config.json, as training writes it:
    `lab.training.trainconfig.TrainConfig`)."""
    try:
        with open(path) as f:
            raw = json.load(f)
    except FileNotFoundError:
        raise ValueError(
            f"config file {path!r} does not exist: give a run's config.json, e.g. "
            f"runs/NAME/config.json"
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(
            f"config file {path!r} is unreadable ({e}): give a run's config.json"
        ) from None
    return config_from_dict(raw, cls, source=path)
