"""Profile CSV contract: round trips and a precise error for every kind of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain.api import (
    PROFILE_HEADER,
    InputError,
    ProfilePoint,
    format_profile_csv,
    parse_profile_csv,
    read_profile,
    write_profile,
)

HEADER = "batch_size,gpu_freq_hz,time_per_sample_s,peak_power_w,mean_power_w"
GOOD = f"{HEADER}\n64,460800000,0.0068,4.9,4.4\n128,307200000,0.01,4.6,4.1\n"


def test_header_is_the_documented_contract() -> None:
    assert PROFILE_HEADER == HEADER


def test_parse_good_profile() -> None:
    points = parse_profile_csv(GOOD, "p.csv")
    assert [(p.batch_size, p.gpu_freq_hz) for p in points] == [
        (64, 460_800_000),
        (128, 307_200_000),
    ]
    assert points[0].time_per_sample_s == pytest.approx(0.0068)
    assert points[0].cpu_freq_hz is None


def test_round_trip_through_file(tmp_path: Path) -> None:
    points = parse_profile_csv(GOOD)
    path = tmp_path / "sub" / "profile.csv"
    write_profile(path, points)
    assert path.read_text().splitlines()[0] == HEADER
    assert read_profile(path) == points
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp file left


def test_full_power_mode_columns_round_trip() -> None:
    text = (
        f"{HEADER},cpu_freq_hz,cpu_cores,emc_freq_hz\n"
        "8,1300500000,0.002,30.1,25.0,2201600000,12,3199000000\n"
    )
    points = parse_profile_csv(text)
    assert points[0].cpu_cores == 12
    assert parse_profile_csv(format_profile_csv(points)) == points
    assert format_profile_csv(points).splitlines()[0].endswith("cpu_freq_hz,cpu_cores,emc_freq_hz")


def test_columns_in_any_order() -> None:
    text = (
        "gpu_freq_hz,batch_size,mean_power_w,peak_power_w,time_per_sample_s\n1000,2,3.0,4.0,0.5\n"
    )
    (point,) = parse_profile_csv(text)
    assert (point.batch_size, point.gpu_freq_hz, point.peak_power_w) == (2, 1000, 4.0)


def _error(text: str) -> InputError:
    with pytest.raises(InputError) as info:
        parse_profile_csv(text, "lut.csv")
    return info.value


@pytest.mark.parametrize(
    ("text", "row", "field", "fragment"),
    [
        ("", None, None, "the file is empty"),
        (HEADER + "\n", None, None, "has a header but no data rows"),
        (
            "batch_size,gpu_freq_hz,time_per_sample_s,peak_power_w\n",
            1,
            None,
            "missing required column(s) mean_power_w",
        ),
        (HEADER + ",watts\n1,2,3,4,4,5\n", 1, None, "unknown column(s) watts"),
        (HEADER + ",batch_size\n", 1, None, "column(s) batch_size appear twice"),
        (HEADER + "\n64,460800000,0.0068,4.9\n", 2, None, "has 4 values, the header has 5"),
        (HEADER + "\n64,460800000,fast,4.9,4.4\n", 2, "time_per_sample_s", "'fast'"),
        (HEADER + "\n64,460800000,0,4.9,4.4\n", 2, "time_per_sample_s", "greater than 0"),
        (HEADER + "\n64,460800000,-0.1,4.9,4.4\n", 2, "time_per_sample_s", "greater than 0"),
        (HEADER + "\n64,460800000,0.1,nan,4.4\n", 2, "peak_power_w", "'nan' is not a finite"),
        (HEADER + "\n64,460800000,inf,4.9,4.4\n", 2, "time_per_sample_s", "'inf' is not a finite"),
        (HEADER + "\n0,460800000,0.1,4.9,4.4\n", 2, "batch_size", "greater than 0"),
        (HEADER + "\n64.5,460800000,0.1,4.9,4.4\n", 2, "batch_size", "'64.5'"),
        (HEADER + "\n64,460800000,0.1,4.0,4.4\n", 2, None, "above peak_power_w"),
        (
            GOOD + "64,460800000,0.007,5.0,4.5\n",
            4,
            None,
            "duplicate point batch_size=64, gpu_freq_hz=460800000 (first at row 2)",
        ),
    ],
)
def test_bad_input_names_row_and_field(
    text: str, row: int | None, field: str | None, fragment: str
) -> None:
    err = _error(text)
    assert err.source == "lut.csv"
    assert err.row == row
    assert err.field == field
    assert fragment in str(err)
    assert str(err).startswith("lut.csv")


def test_same_gpu_frequency_in_two_full_modes_is_not_a_duplicate() -> None:
    text = f"{HEADER},cpu_cores\n8,1000,0.1,5.0,4.0,4\n8,1000,0.09,6.0,5.0,8\n"
    assert len(parse_profile_csv(text)) == 2


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_profile(tmp_path / "absent.csv")


def test_point_mode_key_orders_gpu_first() -> None:
    p = ProfilePoint(
        batch_size=1,
        gpu_freq_hz=5,
        time_per_sample_s=1,
        peak_power_w=2,
        mean_power_w=1,
        cpu_cores=4,
    )
    assert p.mode == (5, 0, 4, 0)
