"""A sweep of LM training runs in a small TOML file: groups of presets × seeds × overrides.

    # sweeps/cpu-matrix.toml
    run_dir = "runs/cpu-matrix"         # optional: the runs' folder (storage every node sees)
    overrides = { steps = 300 }         # optional: for every run

    [[group]]
    presets = ["cpu-fixed", "cpu-stagger"]
    seeds = [0, 1]
    overrides = { "model.window" = 8 }  # optional: for this group's runs (over the top's)

Each (preset, seed) of a group is one run named ``PRESET-sSEED`` (`lab.training.trainconfig.make_config`
builds it, so the overrides are typed and checked there, before anything runs).  Two groups
giving the same name are refused.
"""

from __future__ import annotations

import os

TOP_KEYS = {"run_dir", "overrides", "group"}
GROUP_KEYS = {"presets", "seeds", "overrides"}


def _table(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a table of KEY = VALUE overrides, got {value!r}")
    return value


def _list(value, where: str, kind: type) -> list:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, kind) and not isinstance(v, bool) for v in value)
    ):
        raise ValueError(f"{where} must be a non-empty list of {kind.__name__}s, got {value!r}")
    return value


def load_spec(path: str) -> dict:
    """The spec file's table; a missing file or bad TOML is a ValueError naming it."""
    if not os.path.exists(path):
        raise ValueError(f"sweep spec {path!r} does not exist (see sweeps/*.toml for examples)")
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # 3.10: the same parser, as a package
        try:
            import tomli as tomllib
        except ImportError:
            raise ValueError(
                f"reading sweep spec {path!r} needs Python >= 3.11 (tomllib) or pip install tomli"
            ) from None
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"sweep spec {path!r} is not valid TOML: {e}") from None


def sweep_configs(spec: dict, run_dir: str, where: str = "sweep spec") -> list:
    """The `TrainConfig` of every run of ``spec`` (a parsed spec file), in file order; their
    folders under the spec's ``run_dir``, else ``run_dir``."""
    from lab.training.trainconfig import make_config

    extra = set(spec) - TOP_KEYS
    if extra:
        raise ValueError(f"{where}: unknown keys {sorted(extra)}; use {sorted(TOP_KEYS)}")
    groups = spec.get("group")
    if not isinstance(groups, list) or not groups:
        raise ValueError(f"{where} needs at least one [[group]] with presets and seeds")
    top = _table(spec.get("overrides", {}), f"{where}: overrides")
    folder = spec.get("run_dir", run_dir)
    if not isinstance(folder, str) or not folder:
        raise ValueError(f"{where}: run_dir must be a folder path, got {folder!r}")
    configs, seen = [], set()
    for i, g in enumerate(groups):
        at = f"{where}: group {i + 1}"
        if not isinstance(g, dict):
            raise ValueError(f"{at} must be a table with presets and seeds")
        extra = set(g) - GROUP_KEYS
        if extra:
            raise ValueError(f"{at}: unknown keys {sorted(extra)}; use {sorted(GROUP_KEYS)}")
        over = {**top, **_table(g.get("overrides", {}), f"{at}: overrides")}
        for preset in _list(g.get("presets"), f"{at}: presets", str):
            for seed in _list(g.get("seeds"), f"{at}: seeds", int):
                name = f"{preset}-s{seed}"
                if name in seen:
                    raise ValueError(f"{at}: run {name} is already in an earlier group")
                seen.add(name)
                configs.append(
                    make_config(preset, {**over, "seed": seed, "name": name, "run_dir": folder})
                )
    return configs
