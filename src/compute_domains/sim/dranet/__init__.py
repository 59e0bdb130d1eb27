"""DRANET stand-in: the ``dra.net`` DRA driver that gives pods a GB200 node's RDMA NICs.

Modelled on kubernetes-sigs/dranet v1.3.0 (the version the deployment guide installs), read as a
specification. Roles, one module each:

- ``inventory``: the NICs of a simulated GB200 A4X node, their ResourceSlice devices (DRANET's
  names and attributes) and their host-side stand-ins (``sys/class/net``, ``/dev/infiniband``).
- ``publisher``: one ResourceSlice per node, kept by one publisher per node agent (host).
- ``podconfig``: what a prepared claim gives each pod, persisted per node (DRANET's pod store).
- ``plugin``: the per-node DRA kubelet plugin (registration + ``DRAPlugin`` v1/v1beta1 over unix
  sockets, the same protocol the simulated kubelet speaks with every driver).
- ``nri``: the runtime hooks (DRANET is an NRI plugin): at sandbox start the NICs move into the
  pod's network view and the claim's device status is written; each container gets the RDMA
  character devices.
- ``service``: ties them together for a node agent (``Dranet``).
"""
