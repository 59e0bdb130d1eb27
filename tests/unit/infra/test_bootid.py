from pathlib import Path

import pytest

from compute_domains.infra import bootid, errors


def test_boot_id_is_trimmed_file_content(tmp_path: Path) -> None:
    path = tmp_path / "boot_id"
    path.write_text("  6f1f6f3e-8a3b-4c1e-9d7a-2b1c3d4e5f60\n")
    assert bootid.read_boot_id(path) == "6f1f6f3e-8a3b-4c1e-9d7a-2b1c3d4e5f60"


@pytest.mark.parametrize("content", [None, "", " \n"], ids=["missing", "empty", "blank"])
def test_unusable_boot_id_is_a_config_error(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "boot_id"
    if content is not None:
        path.write_text(content)
    with pytest.raises(errors.ConfigError, match="boot ID"):
        bootid.read_boot_id(path)


def test_default_path_is_the_kernel_file() -> None:
    assert Path("/proc/sys/kernel/random/boot_id") == bootid.BOOT_ID_PATH
