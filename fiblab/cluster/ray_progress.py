"""What a Ray sweep prints: one overall bar (tqdm, with its ETA) and one line per task as it
starts on a node and as it finishes there.

Ray tells the driver when a task ends, not when it starts; a task therefore reports its own
start (its name, its node, the time) into a small queue actor (`ray.util.queue.Queue`, no CPU of
its own), which the driver drains while it waits.  The lines go above the bar on stderr:

    start  tiny-s0  on node 3f2a9c1e (10.0.0.5)  at 0s
    [1/2] done  tiny-s0  on node 3f2a9c1e (10.0.0.5)  41s  ppl bible 57.3  (sweep 43s)
"""

from __future__ import annotations

import sys
import time


def node_label() -> str:
    """This worker's node, as the lines name it: the first 8 hex digits of Ray's node id and
    its IP address (two nodes on one machine share the address, not the id)."""
    import ray

    ctx = ray.get_runtime_context()
    return f"{ctx.get_node_id()[:8]} ({ray.util.get_node_ip_address()})"


def report_start(queue, name: str) -> str:
    """In a task: tell the driver that ``name`` starts now on this node (when it asked, with
    a queue); returns the node's label."""
    node = node_label()
    if queue is not None:
        queue.put((name, node, time.time()))
    return node


class TaskLines:
    """The driver's per-task lines above bar ``bar`` (none when ``enabled`` is False, and then
    no queue actor is started)."""

    def __init__(self, ray, bar, total: int, enabled: bool = True, what: str = "sweep"):
        self.bar, self.total, self.enabled, self.what = bar, total, enabled, what
        self.t0 = time.perf_counter()
        self.wall0 = time.time()
        self.done = 0
        self.queue = None
        if enabled:
            from ray.util.queue import Queue

            self.queue = Queue(actor_options={"num_cpus": 0})

    def write(self, line: str) -> None:
        if self.enabled:
            self.bar.write(line, file=sys.stderr)

    def poll(self, *_) -> None:
        """Print the start lines the tasks reported since the last call."""
        if self.queue is None:
            return
        while not self.queue.empty():
            for name, node, t in self.queue.get_nowait_batch(self.queue.qsize()):
                self.write(f"start  {name}  on node {node}  at {max(0.0, t - self.wall0):.0f}s")

    def finished(self, name: str, node: str, seconds: float, extra: str = "") -> None:
        """The line of a task that returned (after any start line still queued)."""
        self.poll()
        self.done += 1
        self.bar.update(1)
        self.write(
            f"[{self.done}/{self.total}] done  {name}  on node {node}  {seconds:.0f}s"
            + (f"  {extra}" if extra else "")
            + f"  ({self.what} {time.perf_counter() - self.t0:.0f}s)"
        )
