"""Device-test fixtures: an isolated FLOP cache, and trees copied from documented real layouts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

MHZ = 1_000_000

NANO_TABLE = [
    76_800_000,
    153_600_000,
    230_400_000,
    307_200_000,
    384_000_000,
    460_800_000,
    537_600_000,
    614_400_000,
    691_200_000,
    768_000_000,
    844_800_000,
    921_600_000,
]
XAVIER_NX_TABLE = [
    114_750_000,
    204_000_000,
    306_000_000,
    408_000_000,
    510_000_000,
    599_250_000,
    701_250_000,
    752_250_000,
    803_250_000,
    854_250_000,
    905_250_000,
    956_250_000,
    1_007_250_000,
    1_058_250_000,
    1_109_250_000,
]
ORIN_TABLE = [
    114_750_000,
    216_750_000,
    318_750_000,
    420_750_000,
    522_750_000,
    624_750_000,
    726_750_000,
    828_750_000,
    930_750_000,
    1_032_750_000,
    1_134_750_000,
    1_236_750_000,
    1_300_500_000,
]


@pytest.fixture(scope="session", autouse=True)
def _flop_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep FLOP counts of this run out of the user's ~/.cache."""
    old = os.environ.get("EDGETRAIN_CACHE_DIR")
    os.environ["EDGETRAIN_CACHE_DIR"] = str(tmp_path_factory.mktemp("edgetrain-cache"))
    yield
    if old is None:
        os.environ.pop("EDGETRAIN_CACHE_DIR", None)
    else:
        os.environ["EDGETRAIN_CACHE_DIR"] = old


def materialize(root: Path, files: dict[str, str | bytes], links: dict[str, str]) -> Path:
    """Write a fixture tree: relative path -> content, link -> target (relative to the link)."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    for rel, target in links.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
    return root


def _devfreq(
    device: str,
    name: str,
    of_node: str,
    of_name: str,
    table: list[int],
    cur: int,
) -> tuple[dict[str, str | bytes], dict[str, str]]:
    node = f"{device}/devfreq/{name}"
    files: dict[str, str | bytes] = {
        f"{node}/available_frequencies": " ".join(map(str, table)) + " \n",
        f"{node}/cur_freq": f"{cur}\n",
        f"{node}/min_freq": f"{table[0]}\n",
        f"{node}/max_freq": f"{table[-1]}\n",
        f"{node}/governor": "nvhost_podgov\n",
        f"{of_node}/name": of_name.encode() + b"\0",
        f"{device}/load": "312\n",
    }
    depth = device.count("/") + 1
    links = {
        f"{node}/device": "../..",
        f"{device}/of_node": "../" * depth + of_node,
        f"sys/class/devfreq/{name}": "../../" + node[len("sys/") :],
    }
    return files, links


def _decoy() -> tuple[dict[str, str | bytes], dict[str, str]]:
    return _devfreq(
        "sys/devices/15340000.vic",
        "15340000.vic",
        "sys/firmware/devicetree/base/vic@15340000",
        "vic",
        [115_200_000, 1_036_800_000],
        115_200_000,
    )


@pytest.fixture
def nano_tree(tmp_path: Path) -> Path:
    """Jetson Nano, L4T 32.7.1: ina3221x IIO at 6-0040 [R16][R12], idle tegrastats values [R7]."""
    iio = "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    files: dict[str, str | bytes] = {
        "sys/firmware/devicetree/base/model": b"NVIDIA Jetson Nano Developer Kit\0",
        "sys/firmware/devicetree/base/compatible": (
            b"nvidia,p3449-0000+p3448-0000\0nvidia,jetson-nano\0nvidia,tegra210\0"
        ),
        "etc/nv_tegra_release": "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref,"
        " EABI: aarch64, DATE: Sat Feb 19 17:05:08 UTC 2022\n",
        f"{iio}/rail_name_0": "POM_5V_IN\n",
        f"{iio}/in_power0_input": "933\n",
        f"{iio}/in_voltage0_input": "5072\n",
        f"{iio}/in_current0_input": "184\n",
        f"{iio}/rail_name_1": "POM_5V_GPU\n",
        f"{iio}/in_power1_input": "0\n",
        f"{iio}/in_voltage1_input": "5064\n",
        f"{iio}/in_current1_input": "0\n",
        f"{iio}/rail_name_2": "POM_5V_CPU\n",
        f"{iio}/in_power2_input": "84\n",
        f"{iio}/in_voltage2_input": "5064\n",
        f"{iio}/in_current2_input": "16\n",
        f"{iio}/warn_current_limit_0": "32760\n",
        "sys/class/thermal/thermal_zone0/type": "AO-therm\n",
        "sys/class/thermal/thermal_zone0/temp": "33500\n",
        "sys/class/thermal/thermal_zone1/type": "CPU-therm\n",
        "sys/class/thermal/thermal_zone1/temp": "30000\n",
        "sys/class/thermal/thermal_zone2/type": "GPU-therm\n",
        "sys/class/thermal/thermal_zone2/temp": "29500\n",
    }
    df, dl = _devfreq(
        "sys/devices/gpu.0",
        "57000000.gpu",
        "sys/firmware/devicetree/base/gpu",
        "gpu",
        NANO_TABLE,
        76_800_000,
    )
    return materialize(
        tmp_path / "nano",
        {**files, **df},
        {**dl, "proc/device-tree": "../sys/firmware/devicetree/base"},
    )


@pytest.fixture
def xavier_nx_hwmon_tree(tmp_path: Path) -> Path:
    """Xavier NX on JetPack 5: ina3221 hwmon6 at 7-0040 with in7 (sum of shunts) [R13][R12]."""
    hw = "sys/bus/i2c/drivers/ina3221/7-0040/hwmon/hwmon6"
    files: dict[str, str | bytes] = {
        "sys/firmware/devicetree/base/model": b"NVIDIA Jetson Xavier NX Developer Kit\0",
        "etc/nv_tegra_release": "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref,"
        " EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n",
        f"{hw}/name": "ina3221\n",
        f"{hw}/in1_label": "VDD_IN\n",
        f"{hw}/in1_input": "5016\n",
        f"{hw}/curr1_input": "1200\n",
        f"{hw}/in2_label": "VDD_CPU_GPU_CV\n",
        f"{hw}/in2_input": "5016\n",
        f"{hw}/curr2_input": "400\n",
        f"{hw}/in3_label": "VDD_SOC\n",
        f"{hw}/in3_input": "5016\n",
        f"{hw}/curr3_input": "300\n",
        f"{hw}/in4_input": "6\n",
        f"{hw}/in5_input": "2\n",
        f"{hw}/in6_input": "1\n",
        f"{hw}/in7_label": "sum of shunt voltages\n",
        f"{hw}/in7_input": "9\n",
        f"{hw}/curr1_max": "32760\n",
        f"{hw}/update_interval": "10\n",
        "sys/class/thermal/thermal_zone0/type": "cpu-thermal\n",
        "sys/class/thermal/thermal_zone0/temp": "41000\n",
        "sys/class/thermal/thermal_zone1/type": "tj-thermal\n",
        "sys/class/thermal/thermal_zone1/temp": "",  # empty on some boards (jetson-facts §4.8)
    }
    df, dl = _devfreq(
        "sys/devices/17000000.gv11b",
        "17000000.gv11b",
        "sys/firmware/devicetree/base/gv11b@17000000",
        "gv11b",
        XAVIER_NX_TABLE,
        510_000_000,
    )
    xf, xl = _decoy()
    return materialize(tmp_path / "xnx", {**files, **df, **xf}, {**dl, **xl})


@pytest.fixture
def orin_tree(tmp_path: Path) -> Path:
    """AGX Orin on JP6: two hwmon chips with NC channels and in7, devfreq 17000000.gpu [R12]."""
    a = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3"
    b = "sys/bus/i2c/drivers/ina3221/1-0041/hwmon/hwmon4"
    files: dict[str, str | bytes] = {
        "sys/firmware/devicetree/base/model": b"NVIDIA Jetson AGX Orin Developer Kit\0",
        "sys/firmware/devicetree/base/compatible": (
            b"nvidia,p3737-0000+p3701-0005\0nvidia,p3701-0005\0nvidia,tegra234\0"
        ),
        "etc/nv_tegra_release": "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic,"
        " EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n",
        f"{a}/in1_label": "VDD_GPU_SOC\n",
        f"{a}/in1_input": "19000\n",
        f"{a}/curr1_input": "500\n",
        f"{a}/in2_label": "VDD_CPU_CV\n",
        f"{a}/in2_input": "19000\n",
        f"{a}/curr2_input": "100\n",
        f"{a}/in3_label": "VIN_SYS_5V0\n",
        f"{a}/in3_input": "5000\n",
        f"{a}/curr3_input": "600\n",
        f"{a}/in7_label": "sum of shunt voltages\n",
        f"{a}/in7_input": "8\n",
        f"{b}/in1_label": "NC\n",
        f"{b}/in1_input": "0\n",
        f"{b}/curr1_input": "0\n",
        f"{b}/in2_label": "VDDQ_VDD2_1V8AO\n",
        f"{b}/in2_input": "5000\n",
        f"{b}/curr2_input": "200\n",
        f"{b}/in3_label": "NC\n",
        f"{b}/in3_input": "0\n",
        f"{b}/curr3_input": "0\n",
        f"{b}/in7_label": "sum of shunt voltages\n",
        f"{b}/in7_input": "1\n",
    }
    df, dl = _devfreq(
        "sys/devices/platform/bus@0/17000000.gpu",
        "17000000.gpu",
        "sys/firmware/devicetree/base/bus@0/gpu@17000000",
        "gpu",
        ORIN_TABLE,
        1_300_500_000,
    )
    # JP6 class link points at the platform device path
    dl["sys/class/devfreq/17000000.gpu"] = (
        "../../devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu"
    )
    return materialize(tmp_path / "orin", {**files, **df}, dl)
