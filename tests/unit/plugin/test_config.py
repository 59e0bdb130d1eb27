from pathlib import Path

import pytest

from compute_domains.infra import errors
from compute_domains.plugin import config


def test_defaults_are_upstream_paths() -> None:
    s = config.PluginSettings(node_name="n", driver_namespace="ns")
    assert s.paths.dra_socket == Path("/var/lib/kubelet/plugins/compute-domain.nvidia.com/dra.sock")
    assert s.paths.registration_socket == Path(
        "/var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock"
    )
    assert s.paths.local(s.paths.cdi_root) == Path("/var/run/cdi")
    assert s.channel_slots == 8


def test_host_root_moves_local_access_but_not_what_the_kubelet_is_told(tmp_path: Path) -> None:
    paths = config.PathSettings(host_root=tmp_path)
    assert paths.local(paths.dra_socket) == tmp_path / str(paths.dra_socket).lstrip("/")
    assert str(paths.dra_socket).startswith("/var/lib/kubelet/")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"node_name": ""}, "node name"),
        ({"driver_namespace": ""}, "namespace"),
        ({"channel_slots": 0}, "channel slots"),
        ({"channel_slots": 128}, "channel slots"),
        ({"retry": config.RetrySettings(budget_s=50.0)}, "45 s"),
        ({"retry": config.RetrySettings(readiness_timeout_s=41.0)}, "readiness"),
        ({"paths": config.PathSettings(cdi_root=Path("run/cdi"))}, "absolute"),
    ],
    ids=["no-node", "no-namespace", "no-slots", "too-many-slots", "budget", "wait", "relative"],
)
def test_invalid_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"node_name": "n", "driver_namespace": "ns"}
    with pytest.raises(errors.ConfigError, match=message):
        config.PluginSettings(**{**base, **kwargs})  # type: ignore[arg-type]
