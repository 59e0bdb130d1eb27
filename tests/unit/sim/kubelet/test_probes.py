"""Exec probes run the command the kubelet would: ``$(VAR)`` expanded from the static env."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

from lightkube.models.core_v1 import (
    Container,
    EnvVar,
    EnvVarSource,
    ExecAction,
    ObjectFieldSelector,
    Probe,
)

from compute_domains.containers import runtime
from compute_domains.sim.kubelet import podstatus, probes


class _Runtime:
    """Records what an exec probe runs and answers success."""

    def __init__(self) -> None:
        self.ran: list[list[str]] = []

    async def exec(self, running: object, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        self.ran.append(list(argv))
        return 0, ""


def _container(command: list[str]) -> Container:
    return Container(
        name="c",
        env=[
            EnvVar(name="LOG_VERBOSITY", value="4"),
            EnvVar(name="NESTED", value="$(LOG_VERBOSITY)x"),
            EnvVar(
                name="POD_NAME",
                valueFrom=EnvVarSource(fieldRef=ObjectFieldSelector(fieldPath="metadata.name")),
            ),
        ],
        startupProbe=Probe(exec=ExecAction(command=command), periodSeconds=1),
    )


async def test_exec_probe_command_is_expanded_from_the_static_env() -> None:
    """NVIDIA's daemon probe is ``compute-domain-daemon -v $(LOG_VERBOSITY) check``: run
    unexpanded, the flag parse fails and the daemon never turns Ready. Like the kubelet, values
    are taken as written (``NESTED`` is not expanded again) and a ``valueFrom`` entry is empty."""
    c = _container(
        ["check", "-v", "$(LOG_VERBOSITY)", "$(NESTED)", "[$(POD_NAME)]", "$$(X)", "$(NOPE)"]
    )
    rt = _Runtime()
    rec = podstatus.ContainerRecord(name="c", image="i")
    prober = probes.Prober(
        cast(runtime.Runtime, rt),
        cast(runtime.Running, None),
        c,
        rec,
        lambda: None,
        logging.LoggerAdapter(logging.getLogger("test")),
    )
    await prober.run()  # a startup probe alone: ends after its first success
    assert rt.ran == [
        ["check", "-v", "4", "$(LOG_VERBOSITY)x", "[]", "$(X)", "$(NOPE)"],
    ]
    assert rec.started
