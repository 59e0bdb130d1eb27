"""Containers as local processes: the runtime shared by the simulator's nodes and ``validate``.

``runtime`` starts a container through ``container_init`` (a private mount namespace with CDI
device nodes and volume mounts, as root), ``netbind`` makes its wildcard binds land on its own
address, ``procs`` starts and stops child processes that never outlive their parent, ``cdi``
injects CDI devices into a container's config. Nothing here knows Kubernetes or the simulator:
``sim`` (pods on simulated nodes) and ``validate`` (probe containers on a real GPU node) both
build on it, so neither imports the other.
"""
