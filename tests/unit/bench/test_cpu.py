"""CPU accounting by kind of process."""

from __future__ import annotations

import os
import subprocess
import sys

from compute_domains.bench import cpu


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
    assert cpu.categorize("bash") is None


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
