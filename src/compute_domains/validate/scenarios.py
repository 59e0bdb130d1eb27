"""The channel check's workloads and what each must observe (pure).

==================  =======  =======  ============  =========================================
workload            role     GPU      channel       expected
==================  =======  =======  ============  =========================================
no-channel          alloc    first    none          ``cuMemCreate(FABRIC)`` NOT_PERMITTED
exporter            export   first    N (claim a1)  allocates, writes a pattern, exports
same-channel        import   last     N (claim a2)  import succeeds, data matches
other-channel       import   last     M (claim b)   import NOT_PERMITTED
importer-no-channel import   last     none          import NOT_PERMITTED
==================  =======  =======  ============  =========================================

Besides the CUDA outcome, ``judge`` checks that the container saw exactly the channel nodes its
claim injected (none without a claim), so a wrong CDI edit cannot pass by accident.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from compute_domains.infra import errors
from compute_domains.validate import cuda_probe
from compute_domains.validate.report import Check, Status

NOT_PERMITTED = "CUDA_ERROR_NOT_PERMITTED"
"""What the driver answers a process without the right channel."""


class Expect(enum.Enum):
    """What a workload must observe."""

    REFUSED_ALLOC = "cuMemCreate(FABRIC) refused"
    EXPORTED = "allocation exported"
    IMPORT_MATCHES = "import succeeds, data matches"
    REFUSED_IMPORT = "import refused"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """One container of the channel check."""

    name: str
    role: str
    gpu: int
    claim: str | None
    channel: int | None
    expect: Expect


def plan(gpu_indexes: Sequence[int], same: int, other: int) -> tuple[Workload, ...]:
    """The five workloads: exporter side on the first GPU, importers on the last one."""
    if same == other:
        raise errors.ConfigError(f"the two channels must differ (both are {same})")
    first, last = gpu_indexes[0], gpu_indexes[-1]
    return (
        Workload(
            name="no-channel",
            role="alloc",
            gpu=first,
            claim=None,
            channel=None,
            expect=Expect.REFUSED_ALLOC,
        ),
        Workload(
            name="exporter",
            role="export",
            gpu=first,
            claim="validate-claim-a1",
            channel=same,
            expect=Expect.EXPORTED,
        ),
        Workload(
            name="same-channel",
            role="import",
            gpu=last,
            claim="validate-claim-a2",
            channel=same,
            expect=Expect.IMPORT_MATCHES,
        ),
        Workload(
            name="other-channel",
            role="import",
            gpu=last,
            claim="validate-claim-b",
            channel=other,
            expect=Expect.REFUSED_IMPORT,
        ),
        Workload(
            name="importer-no-channel",
            role="import",
            gpu=last,
            claim=None,
            channel=None,
            expect=Expect.REFUSED_IMPORT,
        ),
    )


def judge(w: Workload, result: cuda_probe.ProbeResult | None, rc: int | None) -> Check:
    """Compare one workload's probe result with its expectation."""
    name = f"{w.name}: {w.expect.value}"
    if result is None:
        return Check(name=name, status=Status.FAIL, detail=f"probe printed no result (exit {rc})")
    want = [] if w.channel is None else [f"channel{w.channel}"]
    if result.channels != want:
        return Check(
            name=name,
            status=Status.FAIL,
            detail=f"container saw channel nodes {result.channels}, expected {want}",
        )
    seen = observed(result)
    if w.expect is Expect.EXPORTED or w.expect is Expect.IMPORT_MATCHES:
        good = result.ok and (w.expect is Expect.EXPORTED or result.matched is True)
    else:
        refused = Expect.REFUSED_ALLOC
        step = "cuMemCreate" if w.expect is refused else "cuMemImportFromShareableHandle"
        good = not result.ok and result.step == step and result.error == NOT_PERMITTED
    return Check(name=name, status=Status.PASS if good else Status.FAIL, detail=seen)


def observed(result: cuda_probe.ProbeResult) -> str:
    """One line saying what the probe saw."""
    where = f" on {result.device}" if result.device else ""
    if not result.ok:
        extra = f" ({result.detail})" if result.detail else ""
        return f"{result.step} -> {result.error}{where}{extra}"
    if result.role == "import":
        verdict = "data matches" if result.matched else "DATA DIFFERS"
        return f"imported and read {result.bytes} bytes{where}: {verdict}"
    if result.role == "export":
        return f"allocated, wrote and exported {result.bytes} bytes{where}"
    return f"cuMemCreate(FABRIC) succeeded{where}"
