"""How `make bench-scale` reads its figures: sizes as typed, the median of the rounds, the ratios to the
smallest size and the verdicts the table prints."""

import argparse

import pytest

from bench.scale import combined, parse_sizes, ratio_of, shop_table


def test_sizes_are_read_with_their_suffixes_sorted_and_once():
    assert parse_sizes("1M,10k,10000,100k") == [10_000, 100_000, 1_000_000]
    with pytest.raises(argparse.ArgumentTypeError, match="not a size"):
        parse_sizes("10x")


def test_a_figure_is_the_median_of_the_rounds_that_have_it_and_texts_come_from_the_last():
    rounds = [
        {"receipt": {"p50_ms": 30.0, "cpu_ms": 10.0, "valid": True}, "said": "first"},
        {"receipt": {"p50_ms": 90.0, "cpu_ms": None, "valid": True}, "said": "second"},
        {"receipt": {"p50_ms": 40.0, "cpu_ms": 12.0, "valid": True}, "said": "third"},
    ]
    assert combined(rounds) == {"receipt": {"p50_ms": 40.0, "cpu_ms": 11.0, "valid": True}, "said": "third"}
    assert combined([{"cpu_ms": None}, {"cpu_ms": None}]) == {"cpu_ms": None}


def test_a_ratio_is_the_largest_sizes_cost_over_the_smallests_and_a_rates_the_other_way():
    assert ratio_of(10.0, 15.0) == 1.5
    assert ratio_of(2000.0, 1000.0, rate=True) == 2.0
    assert ratio_of(None, 3.0) is None
    assert ratio_of(0.0, 3.0) is None


def _cost(wall, cpu, queries=9):
    return {"p50_ms": wall, "cpu_ms": cpu, "queries": queries}


def test_the_shop_table_says_which_ratio_is_over_the_target_and_when_statements_change():
    costs = {
        "proposal": (_cost(40.0, 17.0), _cost(80.0, 18.0)),  # the wall doubled, the CPU did not: the machine
        "confirmation": (_cost(10.0, 7.0), _cost(11.0, 7.1)),
        "execution": (_cost(40.0, 20.0), _cost(40.0, 20.0, queries=24)),
        "console_queue": (_cost(100.0, 50.0), _cost(100.0, 50.0)),
        "console_search": (_cost(150.0, 90.0), _cost(12000.0, 2700.0)),
        "orders_page": (_cost(30.0, 15.0), _cost(30.0, None)),
    }
    runs = [
        {"size": size, "load": {"seconds": 1.0}, "costs": {key: pair[i] for key, pair in costs.items()}}
        for i, size in enumerate((10_000, 1_000_000))
    ]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in shop_table(runs).splitlines()}
    assert rows["a proposal (POST /api/agent/tool-calls)"].endswith("| 2.00 | 1.06 | wall **no** |")
    assert rows["a confirmation (preview_approve)"].endswith("| 1.10 | 1.01 | yes |")
    assert rows["an execution (preview_execute)"].endswith("| yes; statements 9 → 24 |")
    assert rows["console search (an order number)"].endswith("| 80.00 | 30.00 | **no** |")
    assert rows["a customer's orders page"].endswith("| 1.00 | — | yes |")
