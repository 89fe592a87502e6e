"""The demo's summary: its drift alert comes with the reason (score months another season than training)."""

from __future__ import annotations

from fixtures.configs import CONFIG

from lakescore.config import load_project
from lakescore.demo_data import FLIGHTS, INCOMING, SCORE_MONTHS
from lakescore.workflows.demo import season_note


def test_a_psi_alert_is_explained_as_season_drift() -> None:
    reasons = ["psi[temp] 0.8150 > max_psi 0.25", "psi[visib] 0.3001 > max_psi 0.25"]
    note = season_note(reasons, source_table=INCOMING, training_filter="month <= 9 and arr_delay.notna()")
    assert note is not None
    assert note.startswith("season drift, expected in this demo: it scores the Oct-Dec flights of "
                           "main.flights.flights_incoming with a model trained on training.yml's rows "
                           "(month <= 9 and arr_delay.notna()), another season, so the distributions of temp, "
                           "visib differ from training")
    one = season_note(reasons[:1], source_table=INCOMING, training_filter=None)
    assert "trained on all of training.yml's rows, another season, so the distribution of temp differs" in one
    # no PSI reason (or none at all): nothing to explain
    assert season_note(["exclusion_rate 0.3000 > max_exclusion_rate 0.2"], source_table=INCOMING,
                       training_filter=None) is None
    assert season_note([], source_table=INCOMING, training_filter=None) is None


def test_the_shipped_config_trains_on_other_months_than_the_demo_scores(demo_tables) -> None:
    """What the note claims holds for the demo as shipped: no training row is in a score month."""
    project = load_project(CONFIG)
    trained = demo_tables[FLIGHTS].query(project.training.data.filter)
    assert len(trained) > 200_000 and not set(trained["month"]) & set(SCORE_MONTHS)
    assert set(demo_tables[INCOMING]["month"]) == {10, 11, 12} == set(SCORE_MONTHS)
