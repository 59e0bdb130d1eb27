"""SessionWatch: IMEX's NV_ERR_IN_USE becomes one report per exit, naming the node and the fix."""

from __future__ import annotations

from compute_domains.daemon import session

IN_USE = "[Dec 02 2026 06:00:00] [ERROR] [tid 7] NV_ERR_IN_USE Failed to allocate Imex session"


def test_an_exit_after_nv_err_in_use_is_reported_with_node_and_fix() -> None:
    posted: list[str] = []
    watch = session.SessionWatch("gb200-r0-n01", posted.append)
    watch.on_line("[INFO] IMEX version is: 580.65")
    watch.on_line(IN_USE)
    assert posted == []  # reported when that child exits, not on the line
    watch.on_exit()
    (message,) = posted
    assert "node gb200-r0-n01" in message and "NV_ERR_IN_USE" in message
    assert "nvidia-imex.service" in message and "systemctl mask" in message
    watch.on_line(IN_USE)
    watch.on_exit()
    assert posted == [message, message]  # the same text: the recorder counts it on one Event
    assert watch.reports == 2


def test_other_exits_are_not_reported() -> None:
    posted: list[str] = []
    watch = session.SessionWatch("n", posted.append)
    watch.on_exit()
    watch.on_line(IN_USE)
    watch.on_exit()
    watch.on_line("[ERROR] something else failed")
    watch.on_exit()  # the next child did not say it: no report
    assert len(posted) == 1


def test_the_pod_note_is_set_on_a_report_and_cleared_when_imex_passes_its_check() -> None:
    watch = session.SessionWatch("n", lambda _: None)
    assert watch.note == ""
    watch.on_line(IN_USE)
    watch.on_exit()
    assert watch.note == session.IN_USE_NOTE
    assert "host nvidia-imex.service" in watch.note and "NV_ERR_IN_USE" in watch.note
    watch.imex_ok()
    assert watch.note == ""


def test_the_shared_imex_gets_each_change_of_the_note_through_on_note() -> None:
    """The clique's shared IMEX has no pod annotation to write: its note goes to the registry."""
    notes: list[str] = []
    watch = session.SessionWatch("n", lambda _: None, on_note=notes.append)
    watch.imex_ok()  # nothing to clear yet
    watch.on_line(IN_USE)
    watch.on_exit()
    watch.on_line(IN_USE)
    watch.on_exit()  # the same note again: not passed on twice
    watch.imex_ok()
    assert notes == [session.IN_USE_NOTE, ""]
