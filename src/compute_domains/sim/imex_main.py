"""Process entry of the simulated IMEX tools: ``python -m compute_domains.sim.imex_main imex|ctl``.

Importing this module runs the tool named by ``sys.argv[1]`` and exits with its status, the way a
package's ``__main__`` does; nothing else should import it. The driver root's ``nvidia-imex-ctl``
imports it from ``python -S -c`` (``driverroot.ctl_script``): a plain ``-q`` is answered before
anything else is imported; any other run gets ``site`` first, as under ``python -m``.
"""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["ctl"]:
    # The drivers' readiness check (`-c <cfg> -q`) is answered without the full tool's imports,
    # nor `signal`'s: the wrapper ignores SIGUSR1/SIGHUP for it (below, for the rest).
    from compute_domains.sim import imex_query

    status = imex_query.main(sys.argv[2:])
    if status is not None:
        sys.exit(status)
    if sys.flags.no_site:  # the wrapper's -S: the full tool runs in the usual environment
        import site

        site.main()

import signal

# SIGUSR1 and SIGHUP would kill the interpreter while it is still importing; the supervising
# daemon may reload the daemon at any time after spawning it.
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)

if sys.argv[1:2] == ["imex"]:
    # The daemon never speaks TLS (authentication is not simulated), and asyncio's optional
    # `import ssl` (OpenSSL's libraries loaded and initialised) was about a tenth of its start;
    # asyncio runs without it, as on a Python built without ssl.
    sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]

from compute_domains.sim import imex  # noqa: E402

sys.exit(imex.main(sys.argv[1:]))
