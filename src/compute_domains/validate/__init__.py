"""GPU-node validation: prove discovery, channel injection and NVLink bandwidth on real hardware.

Three checks, each behind ``cdctl validate``: ``node`` (what the plugin would publish here),
``imex-channels`` (a channel the plugin's CDI output injects really grants fabric memory, and
only to holders of the same channel) and ``nccl`` (the single-node NVLink all-reduce baseline).
Each builds a ``report.Report``; the CLI renders it as text or JSON. Nothing here runs in CI
against hardware: the unit tests cover the pure logic and the no-GPU path.
"""
