"""The controller's registration log line: a broker's first registration (no
PreviousBrokerEpoch, none in the image) is not reported as an unclean shutdown."""

from riverbed.server.broker_sessions import registration_note


def test_clean_restart_has_no_note() -> None:
    assert registration_note(7, known=True) == ""


def test_restart_without_previous_epoch_is_an_unclean_shutdown() -> None:
    assert registration_note(-1, known=True) == ": unclean shutdown"


def test_a_broker_the_image_never_knew_registers_for_the_first_time() -> None:
    assert registration_note(-1, known=False) == ": first registration"
