"""The gate's rule grammar: what parses, what it means, and one clear line for what does not."""

from __future__ import annotations

import pytest

from bench.errors import UserError
from bench.gate.rules import DEFAULT_RULES, METRICS, parse_rule, parse_rules


def test_relative_latency_rule() -> None:
    rule = parse_rule("acquire.p99:+10%")
    assert rule is not None
    assert (rule.metric, rule.info.column, rule.relative, rule.threshold) == (
        "acquire.p99", "acquire_p99_us", True, pytest.approx(0.10)
    )  # fmt: skip
    assert rule.beyond(1000, 1101) and not rule.beyond(1000, 1100) and not rule.beyond(1000, 500)
    assert rule.better_beyond(1000, 800)


def test_throughput_gets_worse_downwards() -> None:
    rule = parse_rule("throughput:-5%")
    assert rule is not None and rule.info.column == "throughput_acq_s"
    assert rule.beyond(100, 94) and not rule.beyond(100, 96) and not rule.beyond(100, 200)


def test_absolute_thresholds() -> None:
    rule = parse_rule("acquire.p50:+2ms")
    assert rule is not None and not rule.relative and rule.threshold == 2_000
    assert rule.beyond(100, 2_101) and not rule.beyond(100, 2_000)
    assert parse_rule("handoff.p99:+500us").threshold == 500
    rt = parse_rule("round-trips:+0.5")
    assert rt is not None and rt.beyond(4.0, 4.6) and not rt.beyond(4.0, 4.4)


def test_zero_baseline_relative_change() -> None:
    rule = parse_rule("round-trips:+10%")
    assert rule is not None and rule.beyond(0, 1) and not rule.beyond(0, 0)


def test_violations_rule_is_the_safety_rule() -> None:
    assert parse_rule("violations:0") is None
    assert [r.metric for r in parse_rules(list(DEFAULT_RULES))] == ["throughput", "acquire.p99"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("acquire.p99", "expected METRIC:THRESHOLD"),
        ("acquire.p98:+10%", "unknown metric 'acquire.p98'"),
        ("latency:+10%", "valid: throughput"),
        ("acquire.p99:10%", "write acquire.p99:+10%"),
        ("acquire.p99:-10%", "gets worse upwards"),
        ("throughput:+5%", "write throughput:-5%"),
        ("acquire.p99:+10", "needs a unit"),
        ("throughput:-5ms", "not a latency"),
        ("acquire.p99:+ten%", "threshold must look like"),
        ("violations:1", "only safety rule is violations:0"),
        ("violations:+0%", "only safety rule"),
        ("", "expected METRIC:THRESHOLD"),
    ],
)
def test_malformed_rules_say_what_is_wrong_in_one_line(text: str, needle: str) -> None:
    with pytest.raises(UserError) as info:
        parse_rule(text)
    message = str(info.value)
    assert needle in message and "\n" not in message
    assert message.startswith("malformed gate rule")


def test_same_metric_twice_is_an_error() -> None:
    with pytest.raises(UserError, match="given twice"):
        parse_rules(["acquire.p99:+10%", "acquire.p99:+20%"])


def test_every_metric_has_a_direction_and_a_column() -> None:
    for name, info in METRICS.items():
        assert info.worse in (+1, -1), name
        assert info.column, name
        sign = "+" if info.worse > 0 else "-"
        rule = parse_rule(f"{name}:{sign}10%")
        assert rule is not None and rule.info is info
