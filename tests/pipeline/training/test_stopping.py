"""The section 8.2 stopping rule as a pure function."""

import pytest

from pipeline.training.predictor import stop_decision


@pytest.mark.parametrize(
    ("losses", "budget", "stop", "reason", "best"),
    [
        ([3.0], 10, False, "", 0),
        ([3.0, 2.0, 1.0], 3, True, "budget", 2),  # budget spent
        ([3.0, 2.0, 1.0], 4, False, "", 2),
        # minimum at epoch 1 (index 1), five more epochs, last one above 1.01 x minimum -> stop
        ([2.0, 1.0, 1.1, 1.2, 1.1, 1.05, 1.02], 100, True, "rule", 1),
        # only four epochs since the minimum -> keep going
        ([2.0, 1.0, 1.1, 1.2, 1.1, 1.05], 100, False, "", 1),
        # five epochs since the minimum but the current one is within 1 % of it -> keep going
        ([2.0, 1.0, 1.1, 1.2, 1.1, 1.05, 1.0099], 100, False, "", 1),
        # exactly 1.01 x minimum is not "above" -> keep going
        ([2.0, 1.0, 1.1, 1.2, 1.1, 1.05, 1.01], 100, False, "", 1),
        # ties: the first minimum is the selected epoch
        ([1.0, 1.0, 1.5, 1.5, 1.5, 1.5, 1.5], 100, True, "rule", 0),
        # a new minimum resets the count
        ([2.0, 1.0, 1.5, 1.5, 0.9, 1.5, 1.5, 1.5, 1.5], 100, False, "", 4),
    ],
)
def test_stopping_rule_table(losses, budget, stop, reason, best):
    d = stop_decision(losses, budget)
    assert (d.stop, d.reason, d.best_epoch) == (stop, reason, best)


def test_patience_and_tolerance_are_parameters():
    assert stop_decision([1.0, 1.2, 1.2], 100, patience=2).stop
    assert not stop_decision([1.0, 1.2, 1.2], 100, patience=2, tolerance=1.5).stop


def test_needs_an_epoch():
    with pytest.raises(ValueError, match="at least one"):
        stop_decision([], 5)
