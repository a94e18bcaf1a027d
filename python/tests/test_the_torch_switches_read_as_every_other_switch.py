"""``GPUSPAN_TORCH_PHASES`` and ``GPUSPAN_TORCH_MEMORY_HISTORY`` are rows of gpuspan's one
settings table: the package reads them through the crate, so ``yes``/``no`` mean what they
mean for every switch, and a bad value gets the error every setting gives."""

import pytest

from gpuspan import _memory_history, _native


def switch_error():
    """What a switch takes, as a keyword of init says it."""
    with pytest.raises(ValueError) as error:
        _native.check_settings({"timeline": "maybe"})
    return str(error.value).split("expected ", 1)[1]


@pytest.mark.parametrize("text, on", [("yes", True), ("on", True), ("1", True), ("no", False),
                                      ("OFF", False), ("0", False)])
def test_phases_take_every_switch_spelling(monkeypatch, text, on):
    monkeypatch.setenv("GPUSPAN_TORCH_PHASES", text)
    assert _native.torch_phases() is on


def test_phases_are_off_unless_set(monkeypatch):
    monkeypatch.delenv("GPUSPAN_TORCH_PHASES", raising=False)
    assert _native.torch_phases() is False


def test_a_bad_phases_value_gets_the_switch_error(monkeypatch):
    monkeypatch.setenv("GPUSPAN_TORCH_PHASES", "maybe")
    with pytest.raises(ValueError) as error:
        _native.torch_phases()
    assert str(error.value) == f'GPUSPAN_TORCH_PHASES="maybe" is not valid: expected {switch_error()}'


@pytest.mark.parametrize("text, entries", [("yes", _memory_history.DEFAULT_ENTRIES), ("1", 100_000),
                                           ("no", None), ("off", None), ("5000", 5000)])
def test_the_memory_history_takes_a_switch_or_a_size(monkeypatch, text, entries):
    monkeypatch.setenv("GPUSPAN_TORCH_MEMORY_HISTORY", text)
    assert _memory_history.entries() == entries


def test_a_bad_memory_history_names_the_variable(monkeypatch):
    monkeypatch.setenv("GPUSPAN_TORCH_MEMORY_HISTORY", "lots")
    with pytest.raises(ValueError) as error:
        _memory_history.entries()
    text = str(error.value)
    assert text.startswith('GPUSPAN_TORCH_MEMORY_HISTORY="lots" is not valid: expected ')
    assert "yes or no" in text and "200000" in text
