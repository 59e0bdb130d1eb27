import json
import subprocess
import sys
from pathlib import Path

from compute_domains.validate import cuda_probe


def test_pattern_is_deterministic() -> None:
    assert cuda_probe.pattern(7, 64) == cuda_probe.pattern(7, 64)
    assert cuda_probe.pattern(7, 64) != cuda_probe.pattern(8, 64)
    assert len(cuda_probe.pattern(1, 2 << 20)) == 2 << 20


def test_result_line_round_trip() -> None:
    res = cuda_probe.ProbeResult(role="import", ok=True, matched=True, channels=["channel0"])
    line = cuda_probe.RESULT_MARKER + json.dumps(
        {"role": "import", "ok": True, "matched": True, "channels": ["channel0"], "future": 1}
    )
    log = f"noise\n{line}\nmore noise\n"
    assert cuda_probe.parse_result(log) == res
    assert cuda_probe.parse_result("nothing here") is None


def test_wait_export_sees_export_or_failure(tmp_path: Path) -> None:
    assert cuda_probe.wait_export(tmp_path, 0.1) is None
    cuda_probe.write_json(tmp_path / cuda_probe.FAILED_FILE, {"error": "X"})
    assert cuda_probe.wait_export(tmp_path, 0.1) == {"error": "X", "failed": True}
    cuda_probe.write_json(tmp_path / cuda_probe.EXPORT_FILE, {"handle": "00"})
    assert cuda_probe.wait_export(tmp_path, 0.1) == {"handle": "00", "failed": False}


def test_without_cuda_python_the_probe_still_reports(tmp_path: Path) -> None:
    """Where cuda-python is missing (this CI), the exporter reports and unblocks importers."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "compute_domains.validate.cuda_probe",
            "export",
            "--exchange",
            str(tmp_path),
            "--timeout",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    res = cuda_probe.parse_result(out)
    assert res is not None and not res.ok
    if res.error == "PROBE_ERROR":  # no cuda-python, or no driver behind it
        assert (tmp_path / cuda_probe.FAILED_FILE).exists()
