"""bench/real_model_profile.py's arithmetic: each part's seconds from a step's metrics, and its bound from what the
step computed at the machine's rates."""

from __future__ import annotations

import pytest

from bench.real_model_profile import bandwidth, bounds, matmul_rate, measured, profile_row

HW = {"matmul_weights": 1e8, "weight_bytes": 4e8, "vocab": 1000.0, "prefill_flops_s": 1e11, "decode_flops_s": 5e10,
      "update_flops_s": 1e11, "bandwidth_bytes_s": 1e10}  # fmt: skip
STEP = {"engine/prefill_s": 2.0, "engine/prefill_tokens": 500.0, "engine/decode_s": 6.0, "engine/decode_steps": 100.0,
        "engine/decode_tokens": 900.0, "engine/constrain_s": 0.5, "engine/sample_s": 1.0,
        "partial/generated_answers": 100.0, "wait_s": 12.0, "drain_s": 1.0, "train_s": 8.0, "update_tokens": 2000.0,
        "step_s": 22.0}  # fmt: skip


def test_each_part_is_its_seconds_against_its_least_seconds():
    took, least = measured(STEP), bounds(STEP, HW)
    assert took == {"prefill": 2.0, "decode": 6.0, "constrain": 0.5, "sample": 1.0, "http_proxy_agent": 3.5,
                    "update": 8.0}  # fmt: skip
    assert least["prefill"] == pytest.approx(500 * 2e8 / 1e11)  # 1.0 s
    # 100 forwards reading 400 MB each (4 s) against 900 row-tokens' FLOPs (3.6 s): the larger
    assert least["decode"] == pytest.approx(4.0)
    assert least["constrain"] == pytest.approx(1000 * 1000 * 8 / 1e10)  # a mask per drawn token (900 + 100 ends)
    assert least["update"] == pytest.approx(2000 * 4e8 / 1e11)
    assert least["http_proxy_agent"] == 0.0
    row = profile_row(STEP, HW)
    assert row["parts"]["prefill"] == {"s": 2.0, "bound_s": 1.0, "over_bound": 2.0}
    assert row["parts"]["http_proxy_agent"]["over_bound"] is None


def test_the_machine_rates_are_measured():
    assert matmul_rate(16, 64, 128) > 1e6 and bandwidth(mib=8) > 1e6
