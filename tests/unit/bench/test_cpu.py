"""CPU accounting by kind of process."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from compute_domains.bench import cpu
from compute_domains.sim import driverroot


def test_command_lines_fall_into_their_categories() -> None:
    assert cpu.categorize("/x/bin/kube-apiserver --etcd-servers=...") == "kube-apiserver"
    assert cpu.categorize("/x/bin/etcd --name sim") == "etcd"
    assert cpu.categorize("python3 -m compute_domains sim serve --home h") == (
        "sim kubelets (supervisor)"
    )
    assert cpu.categorize("python3 .venv/bin/cdctl daemon check") == "daemon probes"
    assert cpu.categorize("python3 .venv/bin/cdctl daemon run") == "IMEX daemons"
    assert cpu.categorize("python3 -m compute_domains.sim.imex_main ctl -q") == (
        "simulated nvidia-imex(-ctl)"
    )
    # What the driver root's nvidia-imex-ctl wrapper execs (python -S -c, not -m).
    wrapper = driverroot.ctl_script("/venv/bin/python3", Path("/src")).splitlines()[-1]
    execs = [*shlex.split(wrapper)[1:-1], "-c", "/imexd/imexd.cfg", "-q"]
    assert cpu.categorize(" ".join(execs)) == "simulated nvidia-imex(-ctl)"
    assert cpu.categorize("bash") is None


@pytest.mark.parametrize(
    ("cmdline", "category"),
    [
        # NVIDIA's v25.12.0 programs, as its chart and daemon template start them.
        ("compute-domain-controller -v 4", "driver controller"),
        ("/img/usr/bin/compute-domain-controller -v 4", "driver controller"),
        (
            "bash -c # Conditionally mask ...\nfi\ncompute-domain-kubelet-plugin -v 4",
            "kubelet plugins",
        ),
        ("compute-domain-kubelet-plugin -v 4", "kubelet plugins"),
        ("bash /img/usr/bin/kubelet-plugin-prestart.sh", "kubelet plugins"),
        ("compute-domain-daemon -v 4 run", "IMEX daemons"),
        ("/img/usr/bin/compute-domain-daemon -v 6 run", "IMEX daemons"),
        ("compute-domain-daemon -v 4 check", "daemon probes"),
        ("compute-domain-daemon run", "IMEX daemons"),
        # The IMEX stand-in NVIDIA's daemon starts from the node's driver root.
        (
            "python3 -m compute_domains.sim.imex_main imex -c /imexd/imexd.cfg",
            ("simulated nvidia-imex(-ctl)"),
        ),
        # Ours, unchanged.
        ("python3 .venv/bin/cdctl controller run", "driver controller"),
        ("python3 .venv/bin/cdctl plugin run", "kubelet plugins"),
        # The resident agent (imex.agents=resident), as the chart starts it: the driver's own.
        (
            "python3 .venv/bin/cdctl agent run --imex-binary /driver-root/usr/bin/nvidia-imex",
            "IMEX agents",
        ),
        # Names that only look alike are not the driver's.
        ("compute-domain-daemon-runner", None),
        ("/x/bin/kube-controller-manager --v=2", "controller-manager+scheduler"),
        (
            "python3 -m compute_domains sim serve --image-map "
            "nvcr.io/nvidia/k8s-dra-driver-gpu=/img",
            "sim kubelets (supervisor)",
        ),
    ],
)
def test_both_drivers_processes_are_attributed(cmdline: str, category: str | None) -> None:
    assert cpu.categorize(cmdline) == category


def test_driver_total_sums_the_driver_kinds_only() -> None:
    used = {
        "driver controller": 0.5,
        "kubelet plugins": 1.0,
        "IMEX daemons": 2.0,
        "daemon probes": 0.25,
        "kube-apiserver": 9.0,
        "exited children of sim kubelets (supervisor)": 4.0,
    }
    assert cpu.driver_total(used) == 3.75
    assert cpu.driver_total({}) == 0.0


def test_delta_counts_own_and_reaped_time() -> None:
    before = ({"etcd": 1.0}, {"sim kubelets (supervisor)": 2.0})
    after = ({"etcd": 1.5, "kube-apiserver": 3.0}, {"sim kubelets (supervisor)": 2.25})
    assert cpu.delta(before, after) == {
        "kube-apiserver": 3.0,
        "etcd": 0.5,
        "exited children of sim kubelets (supervisor)": 0.25,
    }


def test_sample_sees_a_busy_process() -> None:
    # A process whose command line matches a category shows up with its CPU time.
    code = (
        "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass\n"
        "import sys; sys.stdout.write('x'); sys.stdout.flush(); time.sleep(30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, "daemon check"], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.read(1) == b"x"
        own, _ = cpu.sample(os.getpid())
        assert own["daemon probes"] >= 0.25
        assert cpu.sample(proc.pid)[0]["daemon probes"] >= 0.25
        other = subprocess.Popen(["sleep", "30"])
        try:
            assert "daemon probes" not in cpu.sample(other.pid)[0]  # not below that root
        finally:
            other.kill()
            other.wait()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
