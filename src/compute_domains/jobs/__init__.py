"""The platform job controller of the deployment guide (shared/seeds/002 §15.5-15.6).

Given the NVLink domains a platform scheduler allocated to a training job (cluster UUIDs and
node counts), it creates one ComputeDomain over all of them, the shared RDMA
ResourceClaimTemplate and one pod per node, pinned to its domain by
``nvidia.com/gpu.clusteruuid``, with ranks in domain order; and it replaces a lost rank with a
pod pinned to the same domain. ``cdctl job ...`` is its command line; docs/jobs.md its guide.

Modules, one role each:

- ``spec``: the job (domains, pod parameters, derived names), its validation and its record;
- ``plan``: pure builders of the job's objects (ComputeDomain, RDMA template, rank pods);
- ``ranks``: pure derivation of each rank's state from pods and nodes (live, lost, why);
- ``kubeio``: the door to the API server (every request translated once);
- ``launcher``: the operations (preflight, launch, status, replace a rank, delete);
- ``keeper``: ``Keeper.run()``, replacing lost ranks as they are lost (watch-driven).

It is a client of the API server like any platform controller: it imports ``api`` and
``infra`` only, and no component of the driver.
"""
