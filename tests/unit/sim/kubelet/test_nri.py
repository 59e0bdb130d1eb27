"""A pod's network-namespace view (sim/kubelet/nri.py): removing it returns the netdevs a plugin
moved into it to the host, as the kernel does when a namespace is destroyed."""

from __future__ import annotations

from pathlib import Path

from compute_domains.sim.kubelet import nri


def test_removing_a_view_returns_its_moved_netdevs_and_drops_its_own(tmp_path: Path) -> None:
    view = nri.make_netns(tmp_path, "p1", "127.64.0.2")
    host = tmp_path / "sys/class/net"
    (view / "gpu0rdma0" / "device" / "infiniband" / "mlx5_0").mkdir(parents=True)
    (view / "eth1").mkdir()
    (host / "gpu1rdma0").mkdir(parents=True)
    nri.remove_netns(tmp_path, "p1")
    assert not view.exists()
    assert sorted(p.name for p in host.iterdir()) == ["eth1", "gpu0rdma0", "gpu1rdma0"]
    assert (host / "gpu0rdma0" / "device" / "infiniband" / "mlx5_0").is_dir()


def test_removing_an_absent_view_is_a_no_op(tmp_path: Path) -> None:
    nri.remove_netns(tmp_path, "gone")
    assert not (tmp_path / "sys/class/net").exists()
