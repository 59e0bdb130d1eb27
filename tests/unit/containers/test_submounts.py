"""Host mounts below an overlaid system folder are shown in the container (container_init)."""

from compute_domains.containers import container_init


def test_only_the_outermost_mounts_below_the_folder_are_bound() -> None:
    points = [
        "/",
        "/usr",
        "/usr/local/nvidia",
        "/usr/local/nvidia/lib64/extra",
        "/usrx",
        "/proc",
        "/usr/share/fonts",
    ]
    assert container_init.submounts("/usr", points) == ["/usr/local/nvidia", "/usr/share/fonts"]
    assert container_init.submounts("/etc", points) == []
