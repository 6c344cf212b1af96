"""Python loads this at start-up in processes a harness started with `tests.support.faults.update_delay_env`."""

from tests.support.faults import install_from_env

install_from_env()
