"""Board identity (devicetree model, L4T release), thermal zones, and the `device info` report."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from edgetrain.device.devfreq import GpuDevfreq
from edgetrain.device.errors import DeviceError
from edgetrain.device.jtop_backend import select_power_sensor
from edgetrain.device.power import RailReading
from edgetrain.device.sysfs import read_int, read_text, resolve_root

MODEL_FILES = ("proc/device-tree/model", "sys/firmware/devicetree/base/model")  # [R4]
COMPATIBLE_FILES = ("proc/device-tree/compatible", "sys/firmware/devicetree/base/compatible")
L4T_FILE = "etc/nv_tegra_release"  # [R4]
#: marker directory the twin creates; its presence labels every figure as simulated
TWIN_MARKER_DIR = "run/edgetrain-twin"
#: the board, said by whoever deployed this process (the chart's per-board DaemonSet): read
#: only where the devicetree is not, as in an unprivileged container, whose runtime masks
#: /sys/firmware (and /proc/device-tree, a link into it)
ENV_BOARD = "EDGETRAIN_BOARD"

# (substring of the lower-cased devicetree model, board id); first match wins.
_BOARD_PATTERNS: tuple[tuple[str, str], ...] = (
    ("orin nano", "jetson-orin-nano"),
    ("agx orin", "jetson-agx-orin"),
    ("xavier nx", "jetson-xavier-nx"),
    ("agx xavier", "jetson-agx-xavier"),
    ("jetson-agx", "jetson-agx-xavier"),
    ("tx2 nx", "jetson-tx2-nx"),
    ("nano", "jetson-nano"),
)


class BoardIdentity(BaseModel):
    """What the board says it is."""

    model_config = ConfigDict(frozen=True)

    model: str | None  # devicetree model string
    board_id: str | None  # edgetrain slug, e.g. jetson-nano
    soc: str | None  # last `compatible` entry, e.g. tegra210
    l4t: str | None  # e.g. 32.7.1
    jetpack: str | None = None  # from the L4T release (jetpack_for_l4t), e.g. 4.6.1


def _first_readable(root: Path, candidates: tuple[str, ...]) -> str | None:
    for rel in candidates:
        try:
            return (root / rel).read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
    return None


def _first_readable_of(dirs: tuple[Path, ...], name: str) -> str | None:
    for d in dirs:
        text = _first_readable(d, (name,))
        if text is not None:
            return text
    return None


def board_id_from_model(model: str) -> str | None:
    """Map a devicetree model string to an edgetrain board id."""
    lowered = model.lower()
    for needle, board in _BOARD_PATTERNS:
        if needle in lowered:
            return board
    return None


def parse_l4t_release(text: str) -> str | None:
    """'# R32 (release), REVISION: 7.1, ...' -> '32.7.1'."""
    match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    return f"{match.group(1)}.{match.group(2)}" if match else None


# L4T release → JetPack release, from NVIDIA's JetPack archive (developer.nvidia.com/embedded/
# jetpack-archive). One L4T release ships in one JetPack; a release not listed gets no JetPack.
_JETPACK_OF_L4T = {
    "32.6.1": "4.6", "32.7.1": "4.6.1", "32.7.2": "4.6.2", "32.7.3": "4.6.3",
    "32.7.4": "4.6.4", "32.7.5": "4.6.5", "32.7.6": "4.6.6",
    "35.1.0": "5.0.2", "35.2.1": "5.1", "35.3.1": "5.1.1", "35.4.1": "5.1.2",
    "35.5.0": "5.1.3", "35.6.0": "5.1.4",
    "36.3.0": "6.0", "36.4.0": "6.1", "36.4.3": "6.2", "36.4.4": "6.2.1",
    "38.2.0": "7.0",
}


def jetpack_for_l4t(l4t: str | None) -> str | None:
    """The JetPack release of an L4T release ('36.4.3' -> '6.2'); None if not known."""
    return _JETPACK_OF_L4T.get(l4t or "")


def detect_board(root: str | os.PathLike[str] | None = None,
                 device_tree: str | os.PathLike[str] | None = None) -> BoardIdentity:
    """Read devicetree model/compatible and nv_tegra_release under the root. `device_tree`: a
    directory holding the devicetree's `model` and `compatible`, read first (in a container
    the runtime masks /sys/firmware, so the chart mounts the host's elsewhere). Where no
    devicetree is readable, the board is $EDGETRAIN_BOARD's (the chart's per-board agent)."""
    base = resolve_root(root)
    first = (Path(device_tree),) if device_tree is not None else ()
    raw_model = _first_readable_of(first, "model") or _first_readable(base, MODEL_FILES)
    model = raw_model.rstrip("\x00\n ") if raw_model else None
    raw_compat = (_first_readable_of(first, "compatible")
                  or _first_readable(base, COMPATIBLE_FILES))
    soc = None
    if raw_compat:
        entries = [e for e in raw_compat.split("\x00") if e.strip()]
        soc = entries[-1].split(",")[-1].strip() if entries else None
    try:
        l4t = parse_l4t_release(read_text(base / L4T_FILE))
    except OSError:
        l4t = None
    board_id = board_id_from_model(model) if model else os.environ.get(ENV_BOARD) or None
    return BoardIdentity(model=model, board_id=board_id, soc=soc, l4t=l4t,
                         jetpack=jetpack_for_l4t(l4t))


class ThermalZone(BaseModel):
    """One thermal zone."""

    model_config = ConfigDict(frozen=True)

    name: str
    temp_c: float | None


def read_thermal_zones(root: str | os.PathLike[str] | None = None) -> list[ThermalZone]:
    """`sys/class/thermal/thermal_zone*/{type,temp}` (temp in m°C; unreadable -> None)."""
    base = resolve_root(root) / "sys" / "class" / "thermal"
    zones: list[ThermalZone] = []
    paths = sorted(base.glob("thermal_zone*"), key=lambda p: int(p.name[12:] or 0))
    for zone in paths:
        try:
            name = read_text(zone / "type")
        except OSError:
            continue
        try:
            temp: float | None = read_int(zone / "temp") / 1000.0
        except (OSError, ValueError, IndexError):
            temp = None  # e.g. tj-thermal is empty on some p3767 boards
        zones.append(ThermalZone(name=name, temp_c=temp))
    return zones


class GpuInfo(BaseModel):
    """GPU devfreq state."""

    devfreq_path: str
    available_frequencies_hz: list[int]
    cur_freq_hz: int
    min_freq_hz: int
    max_freq_hz: int
    governor: str | None
    load_permille: int | None


class PowerInfo(BaseModel):
    """Rails (mW) and the board total (W)."""

    backend: str
    rails: list[RailReading]
    total_power_w: float
    total_rule: str


class DeviceInfo(BaseModel):
    """What `edgetrain device info` prints; `simulated` is true on a twin tree."""

    sysfs_root: str
    simulated: bool
    board: BoardIdentity
    gpu: GpuInfo | None
    power: PowerInfo | None
    thermal: list[ThermalZone]
    errors: list[str]


def read_device_info(root: str | os.PathLike[str] | None = None) -> DeviceInfo:
    """Collect board, GPU, power and thermal state; missing parts are reported in `errors`."""
    base = resolve_root(root)
    errors: list[str] = []
    gpu: GpuInfo | None = None
    try:
        node = GpuDevfreq.discover(base)
        gpu = GpuInfo(
            devfreq_path=str(node.path),
            available_frequencies_hz=node.available_frequencies_hz(),
            cur_freq_hz=node.cur_freq_hz(),
            min_freq_hz=node.min_freq_hz(),
            max_freq_hz=node.max_freq_hz(),
            governor=node.governor(),
            load_permille=node.load_permille(),
        )
    except DeviceError as exc:
        errors.append(str(exc))
    power: PowerInfo | None = None
    try:
        sensor = select_power_sensor(base)
        reading = sensor.read()
        power = PowerInfo(
            backend=reading.backend,
            rails=reading.rails,
            total_power_w=reading.total_power_w,
            total_rule=reading.total_rule,
        )
    except (DeviceError, RuntimeError) as exc:
        errors.append(str(exc))
    return DeviceInfo(
        sysfs_root=str(base),
        simulated=(base / TWIN_MARKER_DIR).is_dir(),
        board=detect_board(base),
        gpu=gpu,
        power=power,
        thermal=read_thermal_zones(base),
        errors=errors,
    )
