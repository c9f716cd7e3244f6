"""EnvironOverride puts the environment back as it was: earlier values, and unset keys unset."""

import os

import pytest

from rigbench.emulation import EnvironOverride


def test_restore_puts_back_earlier_values_and_unsets_new_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RIGBENCH_TEST_KEPT", "before")
    monkeypatch.delenv("RIGBENCH_TEST_NEW", raising=False)
    override = EnvironOverride()
    override.set({"RIGBENCH_TEST_KEPT": "during", "RIGBENCH_TEST_NEW": "during"})
    override.set({"RIGBENCH_TEST_KEPT": "again"})
    assert os.environ["RIGBENCH_TEST_KEPT"] == "again"
    assert os.environ["RIGBENCH_TEST_NEW"] == "during"
    override.restore()
    assert os.environ["RIGBENCH_TEST_KEPT"] == "before"
    assert "RIGBENCH_TEST_NEW" not in os.environ
    override.restore()  # a second restore changes nothing
    assert os.environ["RIGBENCH_TEST_KEPT"] == "before"
