import pytest

from compute_domains.sim.kubelet import environment


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "1"),
        ("x-$(A)-$(B)", "x-1-two"),
        ("$(MISSING)", "$(MISSING)"),
        ("$$(A)", "$(A)"),
        ("cost $$5", "cost $5"),
        ("$(A", "$(A"),
        ("plain", "plain"),
    ],
)
def test_expand_follows_kubernetes_rules(text: str, expected: str) -> None:
    assert environment.expand(text, {"A": "1", "B": "two"}) == expected
