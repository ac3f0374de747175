"""The Ray tests' two-node cluster on this machine (`ray.cluster_utils.Cluster`: a head and a
worker of 1 CPU each), connected for the module's tests and shut down after them."""

from __future__ import annotations


def two_node_cluster():
    """Generator for a module-scoped fixture: yields (cluster, worker node)."""
    import ray
    from ray.cluster_utils import Cluster

    # A node dies at start-up when its dashboard agent writes its port files later than the
    # raylet's fixed 15 s wait (ray#65983). Here an agent's last port file comes 3-4 s after the
    # GCS's on a quiet machine and 7-12 s under load (16-33 s before pyproject bounded
    # jsonschema; RESULTS). Another try starts a fresh cluster.
    for attempt in range(3):
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
