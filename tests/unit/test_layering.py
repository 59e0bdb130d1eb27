"""Only ``infra/kube/client.py`` builds a lightkube client (STYLE.md §2.1), checked on the source.

Also: only ``infra/kube`` knows lightkube's exception types (issue 14: failures are translated
once, at that boundary).

import-linter (``lint-imports``, contracts in pyproject.toml) checks which package imports
which, but it cannot tell a call from an import, and components must import ``AsyncClient`` for
their type hints. So this walks every module's syntax tree for calls that build a client or its
configuration: ``AsyncClient(...)``, ``Client(...)``, ``KubeConfig.from_*(...)``, however they
were imported. The checker is itself tested on snippets, so it can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import compute_domains

SRC = Path(compute_domains.__file__).parent
ALLOWED = {"infra/kube/client.py"}
"""Modules that may construct a client: the one Kubernetes access point."""
_CLIENTS = {"AsyncClient", "Client"}
_CONFIGS = {"KubeConfig"}


def constructions(source: str) -> list[int]:
    """Line numbers of the lightkube client or kubeconfig constructions in ``source``."""
    tree = ast.parse(source)
    modules: set[str] = set()  # local names bound to lightkube or one of its submodules
    clients: set[str] = set()
    configs: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "lightkube":
                    modules.add(alias.asname or "lightkube")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lightkube"):
            for alias in node.names:
                local = alias.asname or alias.name
                if alias.name in _CLIENTS:
                    clients.add(local)
                elif alias.name in _CONFIGS:
                    configs.add(local)
                else:
                    modules.add(local)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _builds(node.func, modules, clients, configs):
            found.append(node.lineno)
    return sorted(found)


def _builds(func: ast.expr, modules: set[str], clients: set[str], configs: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in clients | configs
    if not isinstance(func, ast.Attribute):
        return False
    # lightkube.AsyncClient(...), lightkube.config.kubeconfig.KubeConfig(...)
    if func.attr in _CLIENTS | _CONFIGS and _rooted_in(func.value, modules):
        return True
    # KubeConfig.from_file(...), kubeconfig.KubeConfig.from_dict(...)
    owner = func.value
    named_config = isinstance(owner, ast.Name) and owner.id in configs
    dotted_config = (
        isinstance(owner, ast.Attribute)
        and owner.attr in _CONFIGS
        and _rooted_in(owner.value, modules)
    )
    return func.attr.startswith("from_") and (named_config or dotted_config)


def _rooted_in(expr: ast.expr, modules: set[str]) -> bool:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in modules


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("from lightkube import AsyncClient\nc = AsyncClient(conf)\n", [2]),
        ("from lightkube import AsyncClient as C\nc = C()\n", [2]),
        ("import lightkube\nc = lightkube.Client()\n", [2]),
        ("from lightkube.config import kubeconfig\nk = kubeconfig.KubeConfig.from_env()\n", [2]),
        ("from lightkube.config.kubeconfig import KubeConfig\nk = KubeConfig.from_file(p)\n", [2]),
        ("from lightkube import AsyncClient\ndef f(c: AsyncClient) -> None:\n    c.list(x)\n", []),
        ("from other import AsyncClient\nc = AsyncClient()\n", []),
    ],
)
def test_the_checker_finds_constructions(source: str, lines: list[int]) -> None:
    assert constructions(source) == lines


def test_only_the_kube_module_constructs_a_client() -> None:
    offenders = {
        f"{path.relative_to(SRC).as_posix()}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).as_posix() not in ALLOWED
        for line in constructions(path.read_text())
    }
    assert offenders == set()


def test_the_kube_module_is_where_clients_are_built() -> None:
    # Guards ALLOWED against going stale: were the construction moved, the check above would
    # silently allow a module that no longer builds anything.
    for allowed in ALLOWED:
        assert constructions((SRC / allowed).read_text()), allowed


def lightkube_exception_imports(source: str) -> list[int]:
    """Line numbers importing ``lightkube.core.exceptions`` (or a name from it) in ``source``."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "lightkube.core.exceptions"
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(
            a.name.startswith("lightkube.core.exceptions") for a in node.names
        ):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("from lightkube.core.exceptions import ApiError\n", [1]),
        ("import lightkube.core.exceptions as e\n", [1]),
        ("from lightkube import AsyncClient\n", []),
    ],
)
def test_the_exception_checker_finds_imports(source: str, lines: list[int]) -> None:
    assert lightkube_exception_imports(source) == lines


def test_only_infra_kube_knows_lightkubes_exceptions() -> None:
    offenders = {
        f"{path.relative_to(SRC).as_posix()}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        if not path.relative_to(SRC).as_posix().startswith("infra/kube/")
        for line in lightkube_exception_imports(path.read_text())
    }
    assert offenders == set()
