import asyncio
import json
import shutil
from pathlib import Path

import pytest

from compute_domains.infra import errors, filelock
from compute_domains.sim import errors as sim_errors
from compute_domains.sim import toolchain

FAKE = toolchain.ToolSpec(name="fake", packages=("example.com/fake",), outputs=("fake",))


def _settings(tmp_path: Path, **kw: object) -> toolchain.ToolchainSettings:
    src = tmp_path / "tools"
    (src / "fake").mkdir(parents=True, exist_ok=True)
    (src / "fake" / "go.mod").write_text("module example.com/fake\n\ngo 1.24\n")
    return toolchain.ToolchainSettings(
        tools_src=src, cache_root=tmp_path / "cache", tools=(FAKE,), **kw
    )  # type: ignore[arg-type]


def test_pin_hash_follows_every_pin(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    base = toolchain.pin_hash(s, "go version go1.26")
    assert toolchain.pin_hash(s, "go version go1.26") == base
    assert toolchain.pin_hash(s, "go version go1.25") != base
    (s.tools_src / "fake" / "go.sum").write_text("example.com/x v1 h1:abc\n")
    assert toolchain.pin_hash(s, "go version go1.26") != base


def test_pin_hash_follows_build_flags(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    other = toolchain.ToolSpec(
        name="fake", packages=FAKE.packages, outputs=FAKE.outputs, ldflags="-s"
    )
    s2 = toolchain.ToolchainSettings(tools_src=s.tools_src, cache_root=s.cache_root, tools=(other,))
    assert toolchain.pin_hash(s, "g") != toolchain.pin_hash(s2, "g")


def _fake_built(tool_dir: Path, content: bytes) -> None:
    (tool_dir / "bin").mkdir(parents=True)
    (tool_dir / "bin" / "fake").write_bytes(content)
    digest = toolchain._sha256(tool_dir / "bin" / "fake")
    (tool_dir / "manifest.json").write_text(json.dumps({"fake": digest}))


def test_manifest_accepts_intact_and_rejects_corrupt(tmp_path: Path) -> None:
    tool_dir = tmp_path / "fake"
    _fake_built(tool_dir, b"\x7fELF binary")
    assert toolchain._manifest_ok(tool_dir, FAKE)
    (tool_dir / "bin" / "fake").write_bytes(b"\x7fELF bin")  # truncated
    assert not toolchain._manifest_ok(tool_dir, FAKE)


def test_manifest_rejects_missing_or_garbled(tmp_path: Path) -> None:
    tool_dir = tmp_path / "fake"
    _fake_built(tool_dir, b"x")
    (tool_dir / "manifest.json").write_text("{not json")
    assert not toolchain._manifest_ok(tool_dir, FAKE)
    shutil.rmtree(tool_dir / "bin")
    assert not toolchain._manifest_ok(tool_dir, FAKE)


def test_cached_tool_is_not_rebuilt(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    go_version = asyncio.run(toolchain._go_version("go"))
    root = s.cache_root / toolchain.pin_hash(s, go_version)
    _fake_built(root / "fake", b"cached")
    seen: list[toolchain.Progress] = []
    toolset, _ = asyncio.run(toolchain.ensure_built(s, seen.append))
    assert [p.step for p in seen] == ["cached"]
    assert toolset.path("fake").read_bytes() == b"cached"


def test_missing_go_is_one_clear_error(tmp_path: Path) -> None:
    s = _settings(tmp_path, go="go-does-not-exist")
    with pytest.raises(errors.ConfigError, match="Go toolchain not found"):
        asyncio.run(toolchain.ensure_built(s))


def test_unfetchable_module_names_tool_and_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _settings(tmp_path)
    (s.tools_src / "fake" / "go.mod").write_text(
        "module example.com/fake\n\ngo 1.24\n\nrequire example.invalid/nothing v1.0.0\n"
    )
    monkeypatch.setenv("GOPROXY", "off")
    monkeypatch.setenv("GOFLAGS", "-mod=mod")
    with pytest.raises(sim_errors.ToolBuildError) as info:
        asyncio.run(toolchain.ensure_built(s))
    assert info.value.tool == "fake"
    assert info.value.step == "download"
    assert "example.invalid/nothing" in str(info.value)
    # nothing half-built is left where a later run would take it as done
    assert not list(s.cache_root.rglob("manifest.json"))


def test_missing_module_source(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    (s.tools_src / "fake" / "go.mod").unlink()
    with pytest.raises(sim_errors.ToolBuildError, match="step 'source'"):
        asyncio.run(toolchain.ensure_built(s))


def test_a_carried_tool_cache_is_used_without_go(tmp_path: Path) -> None:
    carried = tmp_path / "carried"
    _fake_built(carried / "fake", b"prebuilt")
    s = _settings(tmp_path, go="go-does-not-exist", prebuilt=carried)
    seen: list[toolchain.Progress] = []
    toolset, timings = asyncio.run(toolchain.ensure_built(s, seen.append))
    assert [p.step for p in seen] == ["prebuilt"]
    assert toolset.path("fake").read_bytes() == b"prebuilt"
    assert timings == {}


def test_a_corrupt_carried_tool_is_named_and_never_rebuilt(tmp_path: Path) -> None:
    carried = tmp_path / "carried"
    _fake_built(carried / "fake", b"prebuilt")
    (carried / "fake" / "bin" / "fake").write_bytes(b"pre")  # a truncated copy
    s = _settings(tmp_path, prebuilt=carried)
    with pytest.raises(errors.ConfigError, match=r"prebuilt tools at .*: fake missing"):
        asyncio.run(toolchain.ensure_built(s))
    assert not s.cache_root.exists()


def test_a_second_build_waits_for_the_first_and_finds_its_tools(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    go_version = asyncio.run(toolchain._go_version("go"))
    root = s.cache_root / toolchain.pin_hash(s, go_version)
    root.mkdir(parents=True)
    first = filelock.FileLock(root.parent / f"{root.name}.lock", timeout=5)
    seen: list[toolchain.Progress] = []

    async def scenario() -> toolchain.Toolset:
        with first:  # the first build holds the lock...
            second = asyncio.create_task(toolchain.ensure_built(s, seen.append))
            await asyncio.sleep(0.3)
            assert not second.done(), "the second build must wait for the first"
            _fake_built(root / "fake", b"built by the first")  # ...and finishes its tool
        toolset, _ = await second
        return toolset

    toolset = asyncio.run(scenario())
    assert [p.step for p in seen] == ["cached"]
    assert toolset.path("fake").read_bytes() == b"built by the first"


def test_helms_version_stamps_follow_its_go_mod() -> None:
    """The stamps helm's Makefile derives from tools/helm/go.mod: a pin bump that forgets them
    would make ``helm template`` assume another Kubernetes (v1.20 unstamped)."""
    gomod = (Path(__file__).resolve().parents[3] / "tools" / "helm" / "go.mod").read_text()
    pins = {}
    for line in gomod.splitlines():
        words = line.removeprefix("require ").split()
        if len(words) >= 2 and words[1].startswith("v"):
            pins[words[0]] = words[1]
    assert pins.get("helm.sh/helm/v3") == toolchain.HELM_VERSION
    assert pins.get("k8s.io/client-go") == toolchain.HELM_CLIENT_GO
    (helm,) = [spec for spec in toolchain.TOOLS if spec.name == "helm"]
    minor = toolchain.HELM_CLIENT_GO.split(".")[1]
    for var in ("pkg/chartutil", "pkg/lint/rules"):
        assert f"-X helm.sh/helm/v3/{var}.k8sVersionMajor=1 " in helm.ldflags
        assert f"-X helm.sh/helm/v3/{var}.k8sVersionMinor={minor}" in helm.ldflags
    assert f"internal/version.gitCommit={toolchain.HELM_COMMIT}" in helm.ldflags
