"""Sweeps on Ray (issue 16): a probe grid's throughput on 1 vs 2 worker nodes, and Ray's
overhead per task.

    python benchmarks/ray_sweep.py                                # tiny cells, 1-CPU nodes
    python benchmarks/ray_sweep.py --scale quick --cells 8 --cpus-per-node 4
    python benchmarks/ray_sweep.py --json benchmarks/results/ray-sweep.json

Each measurement starts its own `ray.cluster_utils.Cluster` on this machine: a head with no
CPUs (it only schedules) and 1 or 2 worker nodes of ``--cpus-per-node`` CPUs, each task on one
thread (`fiblab.cluster.ray_run.run_probe_grid`, ``threads=1``).  Throughput is cells per hour over the
grid's wall time (the cluster's start and the workers' imports excluded); the ratio is 2 nodes / 1 node.  The overhead is
the wall time per task of ``--overhead-tasks`` tasks that return at once (submit, schedule,
return, fetch), on the 1-node cluster.  On one machine the 2 "nodes" share its cores: the ratio
only shows scaling when the machine has at least 2 × cpus-per-node free cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.header import machine_header  # noqa: E402


def _noop(i: int) -> int:
    return i


def _warm(i: int) -> int:
    import probes.runner  # noqa: F401  (torch and the lab imported once per worker)

    return i


def measure(nodes: int, cpus: int, cells, settings, overhead_tasks: int) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from fiblab.cluster.ray_run import run_probe_grid

    c = Cluster()
    c.add_node(num_cpus=0, include_dashboard=False)
    for _ in range(nodes):
        c.add_node(num_cpus=cpus)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    try:
        out: dict = {"nodes": nodes, "cpus_per_node": cpus, "cells": len(cells)}
        if overhead_tasks:
            task = ray.remote(_noop).options(num_cpus=1)
            ray.get([task.remote(i) for i in range(cpus * nodes)])  # workers started
            t0 = time.perf_counter()
            ray.get([task.remote(i) for i in range(overhead_tasks)])
            out["overhead_ms_per_task"] = 1e3 * (time.perf_counter() - t0) / overhead_tasks
        warm = ray.remote(_warm).options(num_cpus=1)
        ray.get([warm.remote(i) for i in range(cpus * nodes)])  # imports out of the timing
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            recs = run_probe_grid(cells, settings, os.path.join(tmp, "g.jsonl"), progress=False)
            wall = time.perf_counter() - t0
        out.update(
            wall_s=wall,
            cells_per_hour=3600 * len(recs) / wall,
            cell_s_mean=sum(r["seconds"] for r in recs) / len(recs),
        )
        return out
    finally:
        ray.shutdown()
        c.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="tiny", help="probe scale (tiny, quick, demo, paper)")
    ap.add_argument("--steps", type=int, default=None, help="steps per cell (default: scale's)")
    ap.add_argument("--cells", type=int, default=4, help="cells in the grid (seeds 0..N-1)")
    ap.add_argument("--cpus-per-node", type=int, default=1, help="CPUs of each worker node")
    ap.add_argument("--overhead-tasks", type=int, default=200, help="tasks timed for overhead")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()
    import torch

    from probes.grid import grid
    from probes.settings import SCALES

    torch.set_num_threads(1)
    info = machine_header()
    settings = SCALES[args.scale]
    if args.steps:
        settings = replace(settings, steps=args.steps)
    cells = grid(["fib-fixed"], [2], ["uniform"], list(range(args.cells)))
    rows = [measure(n, args.cpus_per_node, cells, settings, args.overhead_tasks) for n in (1, 2)]
    ratio = rows[1]["cells_per_hour"] / rows[0]["cells_per_hour"]
    for r in rows:
        print(
            f"{r['nodes']} node(s) × {r['cpus_per_node']} CPU: {r['cells']} cells in "
            f"{r['wall_s']:.1f} s = {r['cells_per_hour']:.0f} cells/h (cell {r['cell_s_mean']:.1f}"
            f" s); Ray overhead {r.get('overhead_ms_per_task', float('nan')):.2f} ms/task"
        )
    print(f"throughput 2 nodes / 1 node: {ratio:.2f}×")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": rows, "ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
