#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv: torch 2.13.0 in the build this
# machine can use, then fiblab itself in editable mode with its notebooks and dev extras.
#
#   FIBLAB_TORCH=auto (default)   a CUDA build where `nvidia-smi` sees a GPU, else the CPU build
#   FIBLAB_TORCH=cpu              the CPU build (on macOS: PyPI's wheel, CPU + MPS)
#   FIBLAB_TORCH=cu126|cu128|…    that CUDA build, from https://download.pytorch.org/whl/<it>
#
# The CPU build on Linux is torch==2.13.0+cpu from the indexes pip is configured with (a local
# one on the lab's machines), else from the PyTorch CPU index (PyPI's Linux torch is a CUDA
# build).  auto picks the newest build in CUDA_BUILDS that the driver's CUDA version (in
# nvidia-smi's header) supports.  `bash scripts/setup.sh --which` prints the choice and installs
# nothing.  Idempotent: a second run with an unchanged pyproject.toml, this script and torch
# choice does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
TORCH_VERSION=2.13.0
CUDA_BUILDS="cu130 cu128 cu126"  # newest first: the CUDA builds looked for on PyTorch's index
INDEX=https://download.pytorch.org/whl

cuda_build() {  # the newest build in CUDA_BUILDS that the driver runs; nothing without a GPU
    command -v nvidia-smi >/dev/null 2>&1 || return 0
    nvidia-smi -L >/dev/null 2>&1 || return 0
    local have major minor b
    have=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\)\.\([0-9]*\).*/\1 \2/p' | head -1)
    [ -n "$have" ] || return 0
    read -r major minor <<<"$have"
    for b in $CUDA_BUILDS; do  # cu128 needs a driver of CUDA 12.8 or newer
        if [ $((major * 10 + minor)) -ge "${b#cu}" ]; then
            echo "$b"
            return 0
        fi
    done
    echo "setup.sh: the driver reports CUDA $major.$minor, older than every build in" \
        "CUDA_BUILDS ($CUDA_BUILDS): the CPU build (FIBLAB_TORCH=cu126 tries CUDA anyway)" >&2
}

choice=${FIBLAB_TORCH:-auto}
if [ "$choice" = auto ]; then
    choice=$(cuda_build)
    choice=${choice:-cpu}
fi
case "$choice" in
    cpu | cu[0-9]*) ;;
    *)
        echo "setup.sh: FIBLAB_TORCH=$choice is unknown: use auto, cpu or a CUDA build such as cu126" >&2
        exit 2
        ;;
esac
if [ "${1:-}" = --which ]; then
    echo "$choice"
    exit 0
fi

if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.fiblab-setup
want="$({ cat pyproject.toml scripts/setup.sh; echo "$choice"; } | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    pip=(.venv/bin/python -m pip install -q)
    "${pip[@]}" --upgrade pip
    if [ "$choice" != cpu ]; then
        "${pip[@]}" "torch==$TORCH_VERSION+$choice" --index-url "$INDEX/$choice"
    elif [ "$(uname -s)" = Linux ]; then
        "${pip[@]}" "torch==$TORCH_VERSION+cpu" 2>/dev/null ||
            "${pip[@]}" "torch==$TORCH_VERSION+cpu" --index-url "$INDEX/cpu"
    else
        "${pip[@]}" "torch==$TORCH_VERSION" # PyPI's macOS wheels are the CPU (+ MPS) build
    fi
    .venv/bin/python -m pip install -q -e ".[notebooks,dev]"
    echo "$want" >"$stamp"
    .venv/bin/python -c 'import torch; c = torch.version.cuda
print(f"fiblab set-up: torch {torch.__version__}, the", f"CUDA {c}" if c else "CPU", "build")'
fi
# JupyterLab's settings overrides (a notebook opens on its python3 kernel with no "Select Kernel"
# dialog): a wheel installs them as data files, an editable install does not, so copy them.
mkdir -p .venv/share/jupyter/lab/settings
cp notebooks/jupyterlab/overrides.json .venv/share/jupyter/lab/settings/overrides.json
# Notebooks: JupyterLab autosaves outputs into them; this git filter (.gitattributes) stores them
# stripped, so `git diff` and commits never carry outputs (cheap, so set on every run).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git config filter.fiblab-nbstrip.clean "\"$PWD/.venv/bin/python\" -m fiblab.ui.nbstrip --stdin"
fi
