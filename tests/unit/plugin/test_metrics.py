import datetime

from compute_domains.plugin import checkpoint, metrics

T0 = datetime.datetime(2026, 5, 1, tzinfo=datetime.UTC)


def _completed(uid: str, kinds: tuple[str, ...]) -> checkpoint.ClaimEntry:
    return checkpoint.ClaimEntry(
        uid=uid,
        namespace="ns",
        name=uid,
        state=checkpoint.ClaimState.PREPARE_COMPLETED,
        started_at=T0,
        updated_at=T0,
        devices=tuple(
            checkpoint.PreparedDevice(pool_name="n", device_name=f"d{i}", kind=k)
            for i, k in enumerate(kinds)
        ),
    )


def test_request_series_start_at_zero_and_registries_are_per_instance() -> None:
    one, two = metrics.PluginMetrics("a"), metrics.PluginMetrics("b")
    one.requests.labels("compute-domain.nvidia.com", "prepare").inc()
    text = two.render().decode()
    assert (
        'nvidia_dra_requests_total{driver="compute-domain.nvidia.com",operation="prepare"} 0.0'
        in text
    )
    assert 'operation="unprepare"' in text


def test_prepared_devices_gauge_counts_completed_claims_by_type() -> None:
    m = metrics.PluginMetrics("node-a")
    cp = (
        checkpoint.Checkpoint()
        .with_claim(_completed("c1", ("channel",)))
        .with_claim(_completed("c2", ("daemon", "weird")))
    )
    m.observe_checkpoint(cp)
    text = m.render().decode()
    for kind, count in (("channel", 1), ("daemon", 1), ("unknown", 1)):
        assert (
            f'device_type="{kind}",driver="compute-domain.nvidia.com",node="node-a"}} {count}.0'
            in text
        )
