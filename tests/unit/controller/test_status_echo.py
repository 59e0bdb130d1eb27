"""A CD's status write costs one pass, not two (issue 28 point 3).

The controller puts its own write into the cache at once (``observe``); the watch then
delivers the same stored object (same resourceVersion) once more. That echo carries nothing
new, so it starts no pass: at 4,608 nodes a pass is a fifth of a second of CPU on the one event
loop, and a pass begun for the echo is one the last entry's Ready waits behind. A pass also
decodes the stored status once, not twice: the CD it was given was decoded from that version.
"""

from __future__ import annotations

from typing import Any, cast

from lightkube import AsyncClient

from compute_domains import controller
from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import ComputeDomain, ComputeDomainResource
from compute_domains.controller import caches, events, kubeapi, metrics, statussync

UID = "u1"


def _settings() -> controller.ControllerSettings:
    return controller.ControllerSettings(
        namespace="driver", daemon=controller.DaemonSettings(image="img:1"), metrics_port=0
    )


def _cd(version: str, ready: str = "NotReady") -> Any:
    return ComputeDomainResource.from_dict(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.COMPUTE_DOMAIN_KIND,
            "metadata": {
                "name": "cd",
                "namespace": "default",
                "uid": UID,
                "resourceVersion": version,
            },
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "t"}}},
            "status": {
                "status": ready,
                "nodes": [
                    {
                        "name": "n1",
                        "ipAddress": "10.0.0.1",
                        "cliqueID": "c.1",
                        "index": 0,
                        "status": ready,
                    }
                ],
            },
        }
    )


def _cache(queued: list[str]) -> caches.Caches:
    api = kubeapi.Api(cast(AsyncClient, object()), metrics.Metrics())
    return caches.Caches(api, _settings(), lambda uid, _delay: queued.append(uid))


def test_the_watch_echo_of_our_own_write_starts_no_pass() -> None:
    queued: list[str] = []
    cache = _cache(queued)
    cache.cds._apply("ADDED", _cd("5"))
    assert queued == [UID]
    cache.cds.observe(_cd("6", "Ready"))  # our status write, cached at once
    cache.cds._apply("MODIFIED", _cd("6", "Ready"))  # ... and its echo
    assert queued == [UID]
    cache.cds._apply("MODIFIED", _cd("7", "Ready"))  # somebody else's change
    assert queued == [UID, UID]


def test_a_cd_without_resource_versions_is_still_enqueued() -> None:
    queued: list[str] = []
    cache = _cache(queued)
    cache.cds._apply("ADDED", _cd(""))
    cache.cds._apply("MODIFIED", _cd(""))
    assert queued == [UID, UID]


def _sync(cache: caches.Caches) -> statussync.StatusSync:
    api = kubeapi.Api(cast(AsyncClient, object()), metrics.Metrics())
    return statussync.StatusSync(
        api=api,
        cache=cache,
        settings=_settings(),
        recorder=events.EventRecorder(api, instance="test"),
        meter=metrics.Metrics(),
        enqueue=lambda _uid, _delay: None,
    )


def test_the_stored_status_is_decoded_once_per_version() -> None:
    cache = _cache([])
    cache.cds.observe(_cd("8"))
    cd = ComputeDomain.from_resource(_cd("8"))
    sync = _sync(cache)
    assert sync._stored(cd) is cd.status  # decoded with the CD from this very version
    cache.cds.observe(_cd("9", "Ready"))  # the cache moved on: what it holds now counts
    stored = sync._stored(cd)
    assert stored is not None and stored.status.value == "Ready"


def _clique(version: str) -> Any:
    raw = ComputeDomainClique.new(domain_uid=UID, clique_id="c.1", namespace="driver")
    res = raw.to_resource()
    res.metadata.resourceVersion = version  # type: ignore[union-attr]
    return res


def test_each_cached_clique_is_decoded_once_per_version_for_every_pass() -> None:
    """The status pass and the assigner both read a CD's cliques every pass (256 at 4,608
    nodes): one decode per cached version, shared, and forgotten when the clique goes."""
    cache = _cache([])
    cache.cliques.observe(_clique("5"))
    sync = _sync(cache)
    first = sync._cliques(UID)
    assert [c.clique_id for c in first] == ["c.1"]
    assert sync._cliques(UID)[0] is first[0]  # the same version: not decoded again
    (raw,) = cache.cliques.by_index(caches.CD_INDEX, UID)
    assert cache.clique_of(raw) is first[0]  # the assigner reads the same decode
    cache.cliques.observe(_clique("6"))
    assert sync._cliques(UID)[0] is not first[0]  # a new version is decoded anew
