"""Scale-out on Ray: corpus encoding with Ray Data, pipeline evaluation as Ray tasks, and a
local cluster for tests and benchmarks.

Nothing here is imported by the rest of intentrank, and Ray itself is imported only inside
these functions: a laptop run never loads it (``tests/test_scale_ray.py`` checks this). Every
function takes ``address`` (``--ray-address``: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``;
None starts or reuses a local Ray). Workers open indexes by path, so on a multi-machine
cluster the index directory must be on a filesystem every node mounts.
"""
