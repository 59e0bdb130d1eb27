"""The simulated kubelet of one node: what a real kubelet does, against the real API server.

``node.SimNode`` is one node's kubelet; ``sim.agent`` runs one per simulated node. The
container runtime it drives is ``containers.runtime`` (with ``sim.images`` deciding what an
image runs); there is no CRI between them, so the runtime's CDI step (``cdi``) lives here too.

Modules, one per role:

- ``node``: the Node object, Lease heartbeats, the pod watch and one worker per pod;
- ``pods``: one pod from binding to deletion; ``podstatus``: its status as the kubelet writes it;
- ``volumes``: pod volumes and container environment; ``probes``: container probes;
- ``dra``: DRA plugin registration, claim prepare/unprepare and the claim cache checkpoint;
- ``cdi``: the runtime's CDI step (device names to a container's edited config);
- ``server``: the kubelet's HTTPS endpoint (``logs``: ``logfollow``; ``exec``: ``execserver``
  over ``spdy``);
- ``events``: Events written as the node's kubelet.
"""
