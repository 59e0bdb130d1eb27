"""The simulated kubelet of one node: what a real kubelet does, against the real API server.

``node.SimNode`` is one node's kubelet; ``sim.agent`` runs one per simulated node. The
container runtime it drives is ``containers.runtime`` (``sim.images`` decides what an image
runs); there is no CRI between them, so the runtime's CDI step (``cdi``) lives here too.

Modules, one per role:

- ``node``: the pod watch, one worker per pod, pod addresses; ``nodestatus``: the Node object
  and its Lease heartbeat; ``config``: the settings; ``services``: what pods use of their node;
- ``pods``: one pod from binding to deletion; ``podsandbox``: its sandbox (network-namespace
  view, NRI sandbox hooks, ``/etc/hosts``); ``containers``: its containers under their restart
  policy; ``podstatus``: its status as the kubelet writes it; ``statusmanager``: when that status
  is written; ``errors``: why a container cannot start yet;
- ``volumes``: pod volumes; ``environment``: a container's env; ``probes``: container probes;
- ``dra``: the DRA manager, over ``registration`` (plugin sockets), ``claims`` (a pod's claims,
  checked), ``claimcache`` (the ``dra_manager_state`` checkpoint) and ``draplugin`` (the calls);
- ``cdi``: the runtime's CDI step on a node (device names to a container's edited config);
  ``nri``: the runtime's NRI hook points (RunPodSandbox, CreateContainer, StopPodSandbox) and
  each pod's network-namespace view (``/sys/class/net``), which DRANET's stand-in uses;
- ``server``: the kubelet's HTTPS endpoint (``logs``: ``logfollow``; ``exec``: ``execserver``
  over ``spdy``); ``events``: Events written as the node's kubelet.
"""
