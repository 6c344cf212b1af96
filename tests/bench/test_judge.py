"""bench/judge.py's agreement table: the rule's pass (reward 1.0) is the truth, the judge's pass its reward >= 0.5."""

from bench.judge import table


def test_the_agreement_table_counts_each_cell():
    pairs = [(1.0, 1.0), (1.0, 0.5), (1.0, 0.4), (0.0, 0.9), (0.0, 0.0), (0.0, 0.1), (0.0, 0.2)]
    assert table(pairs) == {
        "episodes": 7,
        "true_positive": 2,
        "false_positive": 1,
        "true_negative": 3,
        "false_negative": 1,
        "agreement": round(5 / 7, 4),
    }


def test_an_empty_table_has_no_agreement():
    assert table([])["agreement"] is None
