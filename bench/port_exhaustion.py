#!/usr/bin/env python3
"""The loopback port exhaustion of the 4,608-node runs, reproduced in a private network
namespace with 200 ephemeral ports (issue 28, session 18).

A node host's IMEX stand-ins dial their peers from the node's own address. Dialled the old way,
``bind((ip, 0))`` then ``connect``, each socket takes its port at ``bind``; Linux gives ``bind``
one parity of the ephemeral range and ``connect`` the other, and a ``connect`` that has used up
its own half may not take a port that a ``bind`` holds (until that socket's TIME_WAIT is over).
So once the connections held open to one address (the API server: every virtual node's clients
come from 127.0.0.1) outgrow ``connect``'s half, they fail with EADDRNOTAVAIL. With
``IP_BIND_ADDRESS_NO_PORT`` the port is chosen at ``connect`` and nothing is held back.

Usage (root; the namespace's own port range, not the machine's, is narrowed)::

    for m in old new; do
      unshare -n sh -c "ip link set lo up && echo '40000 40199' > \\
        /proc/sys/net/ipv4/ip_local_port_range && python3 bench/port_exhaustion.py $m 2000 180"
    done

Prints, per mode, the peer dials made, the distinct ports their TIME_WAITs hold, and how many
of the connections then held open to the "API server" could be made.
"""

from __future__ import annotations

import socket
import subprocess
import sys

IP_BIND_ADDRESS_NO_PORT = 24


def main() -> int:
    """Run one mode (see the module docstring)."""
    mode, dials, held = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    peer = socket.socket()
    peer.bind(("127.0.0.1", 50000))
    peer.listen(4096)
    api = socket.socket()
    api.bind(("127.0.0.1", 6443))
    api.listen(4096)
    for i in range(dials):  # 200 node addresses, 10 dials each, closed by the dialler
        s = socket.socket()
        if mode == "new":
            s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        s.bind((f"127.0.1.{1 + i % 200}", 0))
        s.connect(("127.0.0.1", 50000))
        conn, _ = peer.accept()
        s.close()
        conn.close()
    ss = subprocess.run(["ss", "-Htan", "state", "time-wait"], capture_output=True, text=True)
    ports = {line.split()[2].rsplit(":", 1)[1] for line in ss.stdout.splitlines() if line.strip()}
    keep: list[tuple[socket.socket, socket.socket]] = []
    ok = failed = 0
    err = ""
    for _ in range(held):
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", 6443))
        except OSError as e:
            failed += 1
            err = str(e)
            s.close()
            continue
        ok += 1
        keep.append((s, api.accept()[0]))
    print(
        f"{mode}: {dials} peer dials, their TIME_WAITs hold {len(ports)} ports; "
        f"connections held to the API server: {ok} made, {failed} failed {err}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
