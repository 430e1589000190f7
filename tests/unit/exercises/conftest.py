"""Shared by the exercise tests: run ``check`` on an answer and read what it found."""

import re

import pytest

from companion.exercises import check


@pytest.fixture
def caught(capsys):
    """``caught(exercise_id, wrong_answer, mistake)``: assert ``check`` fails the answer, and that
    a failure message matches the regular expression ``mistake`` (the mistake named)."""

    def run(exercise_id, answer, mistake):
        result = check(exercise_id, answer)
        printed = capsys.readouterr().out
        assert not result.passed, f"{exercise_id} accepted a wrong answer:\n{printed}"
        messages = [failure.message for failure in result.failures]
        assert any(re.search(mistake, message) for message in messages), messages
        assert f"{exercise_id} not yet" in printed
        return result

    return run


@pytest.fixture
def accepted(capsys):
    """``accepted(exercise_id, answer)``: assert ``check`` passes a correct answer."""

    def run(exercise_id, answer):
        result = check(exercise_id, answer)
        printed = capsys.readouterr().out
        assert result.passed, printed
        assert f"{exercise_id} correct" in printed
        return result

    return run
