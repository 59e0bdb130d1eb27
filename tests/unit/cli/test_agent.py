"""``cdctl agent run``'s options → the agent's settings and, per served CD, the daemon's."""

from __future__ import annotations

from pathlib import Path

from compute_domains.agent.config import Assignment, Domain
from compute_domains.cli import agent as agent_cli
from compute_domains.cli import inprocess

ENV = {
    "NODE_NAME": "n1",
    "POD_IP": "127.0.0.5",
    "POD_UID": "agent-uid",
    "POD_NAME": "agent-x",
    "POD_NAMESPACE": "drv",
    "MAX_NODES_PER_IMEX_DOMAIN": "4",
    "METRICS_PORT": "8083",
    "DOMAINS_DIR": "/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains",
}


def _domain(clique: str = "c.1") -> Domain:
    return Domain(
        assignment=Assignment(domain_uid="cd-uid", clique_id=clique),
        name="cd",
        namespace="user",
        domain_dir=Path(ENV["DOMAINS_DIR"]) / "cd-uid",
    )


def _opts(env: dict[str, str] = ENV) -> dict[str, object]:
    return inprocess.resolve(inprocess.agent_command(), [], env)


def test_agent_settings_from_its_options() -> None:
    s = agent_cli.agent_settings(_opts())
    assert (s.node_name, s.pod_name, s.pod_namespace, s.pod_ip) == (
        "n1",
        "agent-x",
        "drv",
        "127.0.0.5",
    )
    assert s.domains_dir == Path(ENV["DOMAINS_DIR"]) and s.metrics_port == 8083
    assert not s.shared_imex_eager  # per-domain scope: the chart sets no SHARED_IMEX_EAGER


def test_the_charts_per_clique_scope_makes_the_agent_wait_for_the_eager_label() -> None:
    assert agent_cli.agent_settings(_opts({**ENV, "SHARED_IMEX_EAGER": "true"})).shared_imex_eager
    assert not agent_cli.agent_settings(
        _opts({**ENV, "SHARED_IMEX_EAGER": "false"})
    ).shared_imex_eager


def test_a_served_cd_gets_the_daemon_settings_its_own_pod_would_get() -> None:
    settings = agent_cli.factory(_opts())(_domain())
    ident = settings.identity
    assert (ident.domain_uid, ident.domain_name, ident.domain_namespace) == ("cd-uid", "cd", "user")
    assert (ident.pod_name, ident.pod_uid, ident.node_name) == ("agent-x", "agent-uid", "n1")
    assert ident.clique_id == "c.1" and settings.max_nodes == 4
    folder = Path(ENV["DOMAINS_DIR"]) / "cd-uid"
    assert settings.imex.config_path == folder / "imexd.agent.cfg"
    assert settings.imex.nodes_config_path == folder / "nodes.cfg"
    assert settings.imex.nodes_config_name is None
    # The workloads' copy, where they look (/imexd/imexd.cfg), naming the list as they see it.
    assert settings.imex.client_config_path == folder / "imexd.cfg"
    assert settings.imex.client_nodes_config_name == Path("/imexd/nodes.cfg")
    assert settings.metrics_port == 0  # the agent serves the probes, not each daemon


def test_a_clique_id_given_to_the_agent_beats_the_nodes_label() -> None:
    settings = agent_cli.factory(_opts({**ENV, "CLIQUE_ID": "given.7"}))(_domain("label.1"))
    assert settings.identity.clique_id == "given.7"


def test_imex_sees_the_folder_where_the_agent_says() -> None:
    seen = Path("/domains")
    build = agent_cli.factory(_opts(), seen_as=lambda d: seen / d.assignment.domain_uid)
    assert build(_domain()).imex.nodes_config_name == seen / "cd-uid" / "nodes.cfg"
