"""The Ray tests' two-node cluster on this machine (`ray.cluster_utils.Cluster`: a head and a
worker of 1 CPU each), connected for the module's tests and shut down after them."""

from __future__ import annotations


def two_node_cluster():
    """Generator for a module-scoped fixture: yields (cluster, worker node)."""
    import ray
    from ray.cluster_utils import Cluster

    for attempt in range(3):  # a raylet may miss Ray's fixed 30 s start-up on a loaded machine
        c = Cluster()
        try:
            c.add_node(num_cpus=1, include_dashboard=False)
            worker = c.add_node(num_cpus=1)
            c.wait_for_nodes()
            break
        except Exception:
            c.shutdown()
            if attempt == 2:
                raise
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c, worker
    finally:
        ray.shutdown()
        c.shutdown()
