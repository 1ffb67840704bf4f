"""Published facts and model coefficients for the six simulated Jetson boards.

Over 500 lines because it is one data table: each board's facts sit beside their sources, and
splitting it by board would scatter the calibration that docs/device.md explains as a whole.

Sources are the [Rn] tags of docs/jetson-facts.md; "PT" is the PowerTrain paper (arXiv
2407.13944, Table 2) and "AT" the paper "Accelerated Training on Low-Power Edge Devices".
Anything else is labelled ESTIMATE.
The coefficient table with the reasoning behind each estimate is in docs/device.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MHZ = 1_000_000


def _mhz(*values: float) -> tuple[int, ...]:
    return tuple(round(v * MHZ) for v in values)


def _ladder_khz(start_khz: int, step_khz: int, count: int, *extra_khz: int) -> tuple[int, ...]:
    """CPU frequency ladder in Hz: `count` steps from start, plus extra top entries."""
    return tuple((start_khz + i * step_khz) * 1000 for i in range(count)) + tuple(
        k * 1000 for k in extra_khz
    )


class SensorSpec(BaseModel):
    """One INA3221 chip: driver layout, path relative to the sysfs root, channel -> rail label."""

    model_config = ConfigDict(frozen=True)

    driver: Literal["ina3221x", "ina3221"]
    path: str
    channels: dict[int, str]
    # rail -> bus voltage in mV; ESTIMATE where not 5 V (module inputs and 5 V rails are 5 V)
    voltages_mv: dict[str, int] = Field(default_factory=dict)


class PhysicsSpec(BaseModel):
    """Coefficients of the power and time model (see edgetrain.device.sim.physics)."""

    model_config = ConfigDict(frozen=True)

    # --- GPU compute (roofline) ---
    gpu_cuda_cores: int
    gpu_flops_per_cycle: float  # 2 FLOP (one FMA) per CUDA core per cycle, FP32
    eff_max: float  # ESTIMATE: fraction of peak FP32 rate that training kernels reach
    eff_half_batch: float  # ESTIMATE: batch at which eff(b) is half of eff_max
    # --- GPU power: k * util(b) * activity * f * V(f)^2 ---
    gpu_k_w_per_hz: float  # ESTIMATE: calibrated switched capacitance (W per Hz at V = Vmin)
    util_min: float  # ESTIMATE: util(b) at b -> 0
    util_half_batch: float  # ESTIMATE: util(b) = min + (1-min)*b/(b+half)
    stall_activity: float  # ESTIMATE: relative switching activity while stalled on memory
    gpu_static_w: float  # ESTIMATE: leakage + clocks when the GPU is powered but idle
    v_knee_hz: int  # GPU voltage is flat (Vmin) up to this frequency
    v_ratio_at_fmax: float  # ESTIMATE: V(fmax)/Vmin, linear between knee and fmax
    # --- memory ---
    emc_bus_bytes: int  # DRAM bus width in bytes; bandwidth = bytes * 2 (DDR) * emc_hz
    bw_efficiency: float  # ESTIMATE: achievable fraction of the DRAM peak
    activation_traffic: float  # ESTIMATE: DRAM bytes per activation byte (fwd+bwd, L2 misses)
    param_traffic: float  # ESTIMATE: DRAM bytes per parameter byte per step (fwd, bwd, optim)
    mem_busy_w_at_max: float  # ESTIMATE: EMC+DRAM power at max EMC clock and full bandwidth
    # --- CPU (host side of training) ---
    cpu_core_busy_w_at_max: float  # ESTIMATE: one fully busy core at the top CPU clock
    cpu_core_idle_w: float  # ESTIMATE: one online idle core
    cpu_v_ratio: float  # ESTIMATE: Vmax/Vmin of the CPU rail across its table
    step_overhead_s: float  # ESTIMATE: Python/launch time per minibatch at the top CPU clock
    load_s_per_sample: float  # ESTIMATE: data loading/augmentation per sample, one core, top clock
    # --- board ---
    idle_w: float  # ESTIMATE unless noted: module idle (rail total), GPU rail-gated, CPUs excluded
    ambient_c: float = 25.0  # ESTIMATE
    thermal_c_per_w: float  # ESTIMATE: steady-state GPU temperature rise per watt
    thermal_tau_s: float = 30.0  # ESTIMATE: thermal time constant
    throttle_c: float  # ESTIMATE: no reliable source for trip points (jetson-facts §4.8)
    power_settle_tau_s: float = 0.8  # ESTIMATE: PT §2.5 sees power settle in 2-3 s (~3 tau)


class BoardSpec(BaseModel):
    """Everything the twin needs to build and animate one board's sysfs tree."""

    model_config = ConfigDict(frozen=True)

    name: str
    devicetree_model: str
    compatible: str
    soc: str
    jetpack: str
    l4t_release: str  # content of etc/nv_tegra_release
    kernel_release: str
    order_sensitive_devfreq: bool  # 4.9 kernels reject min > max and max < min [R21]
    gpu_of_node_name: str
    gpu_device_dir: str  # sysfs device dir (holds load, railgate_enable)
    gpu_of_node_dir: str  # devicetree node the device's of_node link points to
    devfreq_name: str
    gpu_freqs_hz: tuple[int, ...]
    sensors: tuple[SensorSpec, ...]
    total_rail: str | None  # None: the total is the sum of the rails
    # rail -> {component: weight}; components: idle, cpu, gpu, mem
    rail_components: dict[str, dict[str, float]]
    thermal_zones: tuple[str, ...]
    cpu_cores: int
    # The CPU core (the big cores on a mixed board): what an emulated node's QEMU models.
    cpu_core: str
    cpu_freqs_hz: tuple[int, ...]
    emc_freqs_hz: tuple[int, ...]
    emc_debugfs_dir: str
    physics: PhysicsSpec
    notes: tuple[str, ...] = Field(default=())

    @property
    def gpu_fmax_hz(self) -> int:
        """Top of the GPU frequency table."""
        return max(self.gpu_freqs_hz)

    @property
    def gpu_fmin_hz(self) -> int:
        """Bottom of the GPU frequency table."""
        return min(self.gpu_freqs_hz)


_JP4_ZONES = ("AO-therm", "CPU-therm", "GPU-therm", "PLL-therm", "thermal-fan-est")
_JP5_ZONES = ("cpu-thermal", "gpu-thermal", "cv0-thermal", "soc0-thermal", "tj-thermal")

JETSON_NANO = BoardSpec(
    name="jetson-nano",
    devicetree_model="NVIDIA Jetson Nano Developer Kit",  # ESTIMATE (devkit model string)
    compatible="nvidia,p3449-0000+p3448-0000\0nvidia,jetson-nano\0nvidia,tegra210",
    soc="tegra210",
    jetpack="4.6.1",
    l4t_release=(
        "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64, "
        "DATE: Sat Feb 19 17:05:08 UTC 2022"
    ),
    kernel_release="4.9.253-tegra",
    order_sensitive_devfreq=True,  # 4.9 kernel [R21]
    gpu_of_node_name="gpu",  # [R27]
    gpu_device_dir="sys/devices/gpu.0",  # [R6][R10][R18]
    gpu_of_node_dir="sys/firmware/devicetree/base/gpu@57000000",
    devfreq_name="57000000.gpu",
    gpu_freqs_hz=_mhz(
        76.8, 153.6, 230.4, 307.2, 384, 460.8, 537.6, 614.4, 691.2, 768, 844.8, 921.6
    ),  # [R10]
    sensors=(
        SensorSpec(
            driver="ina3221x",
            path="sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0",  # [R16]
            channels={0: "POM_5V_IN", 1: "POM_5V_GPU", 2: "POM_5V_CPU"},  # [R12][R7]
        ),
    ),
    total_rail="POM_5V_IN",  # [R1][R23 #51]
    rail_components={
        "POM_5V_IN": {"idle": 1.0, "cpu": 1.0, "gpu": 1.0, "mem": 1.0},
        "POM_5V_GPU": {"gpu": 1.0},
        # idle tegrastats: IN 933 mW, CPU 84 mW [R7] -> ~9 % of idle on the CPU rail
        "POM_5V_CPU": {"cpu": 1.0, "idle": 0.09},
    },
    thermal_zones=_JP4_ZONES,
    cpu_cores=4,  # [R6][R26]
    cpu_core="cortex-a57",  # [R6]
    # ESTIMATE: the usual T210 A57 cpufreq table; the top (1479 MHz) is in nvpmodel [R26]
    cpu_freqs_hz=tuple(
        k * 1000
        for k in (
            102000,
            204000,
            307200,
            403200,
            518400,
            614400,
            710400,
            825600,
            921600,
            1036800,
            1132800,
            1224000,
            1326000,
            1428000,
            1479000,
        )
    ),
    # ESTIMATE: T210 EMC ladder; the 1600 MHz top is in nvpmodel [R26]
    emc_freqs_hz=_mhz(204, 408, 665.6, 800, 1065.6, 1331.2, 1600),
    emc_debugfs_dir="sys/kernel/debug/clk/override.emc",  # [R19][R18]
    physics=PhysicsSpec(
        gpu_cuda_cores=128,  # public NVIDIA spec (not in jetson-facts)
        gpu_flops_per_cycle=256.0,
        eff_max=0.45,
        eff_half_batch=2.0,
        # Calibrated (AT Fig. 1): b=128 crosses 5 W between 307.2 and 384 MHz, b=64 between
        # 460.8 and 537.6 MHz, and 614.4 MHz stays under 7 W for every batch.
        gpu_k_w_per_hz=1.196e-8,
        util_min=0.0,
        util_half_batch=40.0,  # AT Fig. 1 needs util(128)/util(64) > 1.2
        stall_activity=0.15,
        gpu_static_w=0.15,
        v_knee_hz=460_800_000,  # fmax_at_vmin_safe [R27]
        v_ratio_at_fmax=1.06,  # bounded by AT Fig. 1 (614.4 MHz safe at 7 W); [R32] shape only
        emc_bus_bytes=8,  # 64-bit LPDDR4, 25.6 GB/s at 1600 MHz (public NVIDIA spec)
        bw_efficiency=0.6,
        activation_traffic=25.0,  # 256 KB L2: most activations round-trip DRAM several times
        param_traffic=4.0,
        mem_busy_w_at_max=0.4,
        cpu_core_busy_w_at_max=0.45,
        cpu_core_idle_w=0.03,
        cpu_v_ratio=1.4,
        step_overhead_s=0.06,
        load_s_per_sample=0.0003,
        idle_w=1.05,  # POM_5V_IN idle 933 mW measured [R7]; twin default range 1.0-1.5
        thermal_c_per_w=5.0,
        throttle_c=80.0,
    ),
)

_TX2_LADDER = _mhz(
    114.75,
    216.75,
    318.75,
    420.75,
    522.75,
    624.75,
    726.75,
    828.75,
    930.75,
    1032.75,
    1134.75,
    1236.75,
    1300.5,
)

JETSON_TX2_NX = BoardSpec(
    name="jetson-tx2-nx",
    devicetree_model="NVIDIA Jetson TX2 NX Developer Kit",  # ESTIMATE
    compatible="nvidia,p3509-0000+p3636-0001\0nvidia,tegra186",
    soc="tegra186",
    jetpack="4.6.1",
    l4t_release=(
        "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t186ref, EABI: aarch64, "
        "DATE: Sat Feb 19 17:07:00 UTC 2022"
    ),
    kernel_release="4.9.253-tegra",
    order_sensitive_devfreq=True,
    gpu_of_node_name="gp10b",
    gpu_device_dir="sys/devices/17000000.gp10b",  # [R18]
    gpu_of_node_dir="sys/firmware/devicetree/base/gp10b@17000000",
    devfreq_name="17000000.gp10b",
    # Full table NOT FOUND (jetson-facts §5): 114.75 and 1300.5 MHz are known members; the
    # 102 MHz ladder between them is ESTIMATE (the same ladder as Orin's [R11]).
    gpu_freqs_hz=_TX2_LADDER,
    sensors=(
        SensorSpec(
            driver="ina3221x",
            path="sys/bus/i2c/drivers/ina3221x/1-0040/iio:device0",  # bus ESTIMATE (§5)
            channels={0: "VDD_IN", 1: "VDD_CPU_GPU", 2: "VDD_SOC"},  # [R12]
        ),
    ),
    total_rail="VDD_IN",  # [R12]
    rail_components={
        "VDD_IN": {"idle": 1.0, "cpu": 1.0, "gpu": 1.0, "mem": 1.0},
        "VDD_CPU_GPU": {"cpu": 1.0, "gpu": 1.0, "idle": 0.25},  # ESTIMATE (TX2 idle [R7])
        "VDD_SOC": {"idle": 0.35, "mem": 0.5},  # ESTIMATE
    },
    thermal_zones=_JP4_ZONES,
    cpu_cores=6,  # 2 Denver + 4 A57 [R29]; the twin treats them as equal (ESTIMATE)
    cpu_core="cortex-a57",  # the A57 cluster (Denver 2: NVIDIA's own ARMv8.0 core) [R29]
    cpu_freqs_hz=_ladder_khz(345600, 153600, 12),  # ESTIMATE ladder to ~2.0 GHz [R29]
    emc_freqs_hz=_mhz(665.6, 1062.4, 1331.2, 1600, 1866),  # ESTIMATE
    emc_debugfs_dir="sys/kernel/debug/bpmp/debug/clk/emc",  # [R19]
    physics=PhysicsSpec(
        gpu_cuda_cores=256,  # public NVIDIA spec
        gpu_flops_per_cycle=512.0,
        eff_max=0.45,
        eff_half_batch=2.0,
        gpu_k_w_per_hz=6.6e-9,  # ESTIMATE: calibrated to 8-11 W at fmax (jetson-facts §3)
        util_min=0.0,
        util_half_batch=40.0,
        stall_activity=0.15,
        gpu_static_w=0.5,
        v_knee_hz=522_750_000,  # ESTIMATE
        v_ratio_at_fmax=1.25,
        emc_bus_bytes=16,  # 128-bit LPDDR4, 51.2 GB/s (public NVIDIA spec)
        bw_efficiency=0.6,
        activation_traffic=20.0,
        param_traffic=4.0,
        mem_busy_w_at_max=0.7,
        cpu_core_busy_w_at_max=0.6,
        cpu_core_idle_w=0.03,
        cpu_v_ratio=1.4,
        step_overhead_s=0.04,
        load_s_per_sample=0.00025,
        idle_w=1.55,  # TX2 (not NX) idle VDD_IN 1.04 W [R7]; range 1.5-2 W (§3)
        thermal_c_per_w=3.5,
        throttle_c=85.0,
    ),
)

_XAVIER_NX_GPU = _mhz(
    114.75,
    204,
    306,
    408,
    510,
    599.25,
    701.25,
    752.25,
    803.25,
    854.25,
    905.25,
    956.25,
    1007.25,
    1058.25,
    1109.25,
)  # unattributed; max [R9]
_CARMEL_LADDER = _ladder_khz(115200, 76800, 29)  # 115.2 .. 2265.6 MHz, 29 entries (PT Table 2)

JETSON_XAVIER_NX = BoardSpec(
    name="jetson-xavier-nx",
    devicetree_model="NVIDIA Jetson Xavier NX Developer Kit",  # ESTIMATE
    compatible="nvidia,p3509-0000+p3668-0001\0nvidia,tegra194",
    soc="tegra194",
    jetpack="4.6.1",
    l4t_release=(
        "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t186ref, EABI: aarch64, "
        "DATE: Sat Feb 19 17:07:00 UTC 2022"
    ),
    kernel_release="4.9.253-tegra",
    order_sensitive_devfreq=True,  # [R10][R21]: ordering confirmed on Xavier
    gpu_of_node_name="gv11b",
    gpu_device_dir="sys/devices/17000000.gv11b",  # [R9]
    gpu_of_node_dir="sys/firmware/devicetree/base/gv11b@17000000",
    devfreq_name="17000000.gv11b",
    gpu_freqs_hz=_XAVIER_NX_GPU,
    sensors=(
        SensorSpec(
            driver="ina3221x",
            path="sys/bus/i2c/drivers/ina3221x/7-0040/iio:device0",  # bus as JP5 [R13]
            channels={0: "VDD_IN", 1: "VDD_CPU_GPU_CV", 2: "VDD_SOC"},  # [R13][R12]
        ),
    ),
    total_rail="VDD_IN",
    rail_components={
        "VDD_IN": {"idle": 1.0, "cpu": 1.0, "gpu": 1.0, "mem": 1.0},
        "VDD_CPU_GPU_CV": {"cpu": 1.0, "gpu": 1.0, "idle": 0.15},  # ESTIMATE
        "VDD_SOC": {"idle": 0.35, "mem": 0.5},  # ESTIMATE
    },
    thermal_zones=_JP4_ZONES,
    cpu_cores=6,  # [R9]
    cpu_core="carmel",  # NVIDIA Carmel, ARMv8.2 [R9]
    cpu_freqs_hz=(*_CARMEL_LADDER[:24], 1907200_000),  # ESTIMATE; 1907.2 MHz top [R9]
    emc_freqs_hz=_mhz(204, 665.6, 1065.6, 1600, 1866),  # ESTIMATE; 1600 MHz in nvpmodel [R9]
    emc_debugfs_dir="sys/kernel/debug/bpmp/debug/clk/emc",  # [R19]
    physics=PhysicsSpec(
        gpu_cuda_cores=384,  # public NVIDIA spec
        gpu_flops_per_cycle=768.0,
        eff_max=0.45,
        eff_half_batch=2.0,
        gpu_k_w_per_hz=9.4e-9,  # ESTIMATE: calibrated to 10-14 W at fmax (§3)
        util_min=0.0,
        util_half_batch=40.0,
        stall_activity=0.15,
        gpu_static_w=0.1,
        v_knee_hz=510_000_000,  # ESTIMATE (no public T194 V-F table, §3)
        v_ratio_at_fmax=1.25,
        emc_bus_bytes=16,  # 128-bit LPDDR4x, 59.7 GB/s (public NVIDIA spec)
        bw_efficiency=0.6,
        activation_traffic=18.0,
        param_traffic=4.0,
        mem_busy_w_at_max=1.0,
        cpu_core_busy_w_at_max=0.7,
        cpu_core_idle_w=0.05,
        cpu_v_ratio=1.4,
        step_overhead_s=0.03,
        load_s_per_sample=0.0002,
        idle_w=3.0,  # ESTIMATE: range 3-4 W (§3)
        thermal_c_per_w=3.0,
        throttle_c=85.0,
    ),
)

JETSON_AGX_XAVIER = BoardSpec(
    name="jetson-agx-xavier",
    devicetree_model="Jetson-AGX",  # ESTIMATE (JP4 AGX Xavier devkit string)
    compatible="nvidia,p2972-0000\0nvidia,galen\0nvidia,tegra194",
    soc="tegra194",
    jetpack="4.6.1",
    l4t_release=(
        "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t186ref, EABI: aarch64, "
        "DATE: Sat Feb 19 17:07:00 UTC 2022"
    ),
    kernel_release="4.9.253-tegra",
    order_sensitive_devfreq=True,  # [R10][R21]
    gpu_of_node_name="gv11b",
    gpu_device_dir="sys/devices/17000000.gv11b",  # [R6][R10][R20]
    gpu_of_node_dir="sys/firmware/devicetree/base/gv11b@17000000",
    devfreq_name="17000000.gv11b",
    gpu_freqs_hz=_mhz(
        114.75,
        216.75,
        318.75,
        420.75,
        522.75,
        624.75,
        675.75,
        828.75,
        905.25,
        1032.75,
        1198.5,
        1236.75,
        1338.75,
        1377,
    ),  # L4T 32.4.4 [R10]
    sensors=(
        SensorSpec(
            driver="ina3221x",
            path="sys/bus/i2c/drivers/ina3221x/1-0040/iio:device0",  # [R15]
            channels={0: "GPU", 1: "CPU", 2: "SOC"},  # [R12]
            voltages_mv={"GPU": 19000, "CPU": 19000, "SOC": 19000},  # ESTIMATE (VIN side)
        ),
        SensorSpec(
            driver="ina3221x",
            path="sys/bus/i2c/drivers/ina3221x/1-0041/iio:device1",  # [R15]
            channels={0: "CV", 1: "VDDRQ", 2: "SYS5V"},  # [R12]
            voltages_mv={"CV": 19000, "VDDRQ": 19000, "SYS5V": 5000},  # ESTIMATE
        ),
    ),
    total_rail=None,  # sum of all six [R1][R12]
    # Idle split from the near-idle tegrastats dump (GPU 1155, CPU 385, SOC 2504, CV 0,
    # VDDRQ 192, SYS5V 2692 mW) [R7]; the load split is ESTIMATE.
    rail_components={
        "GPU": {"idle": 0.167, "gpu": 1.0},
        "CPU": {"idle": 0.056, "cpu": 1.0},
        "SOC": {"idle": 0.363, "mem": 0.4},
        "CV": {},
        "VDDRQ": {"idle": 0.028, "mem": 0.6},
        "SYS5V": {"idle": 0.386},
    },
    thermal_zones=_JP4_ZONES,
    cpu_cores=8,  # [R6]
    cpu_core="carmel",  # [R6]
    cpu_freqs_hz=_CARMEL_LADDER,  # ESTIMATE values; 29 entries to 2265.6 MHz (PT Table 2)
    # ESTIMATE values; 9 entries to 2133 MHz (PT Table 2); 1065.6/1331.2/1600 in nvpmodel [R6]
    emc_freqs_hz=_mhz(204, 408, 665.6, 800, 1065.6, 1331.2, 1600, 1866, 2133),
    emc_debugfs_dir="sys/kernel/debug/bpmp/debug/clk/emc",  # [R19]
    physics=PhysicsSpec(
        gpu_cuda_cores=512,  # PT Table 2
        gpu_flops_per_cycle=1024.0,
        eff_max=0.45,
        eff_half_batch=2.0,
        gpu_k_w_per_hz=1.59e-8,  # ESTIMATE: calibrated to 25-30 W at fmax (§3)
        util_min=0.0,
        util_half_batch=40.0,
        stall_activity=0.15,
        gpu_static_w=0.75,
        v_knee_hz=522_750_000,  # ESTIMATE
        v_ratio_at_fmax=1.3,
        emc_bus_bytes=32,  # 256-bit LPDDR4x, 136.5 GB/s (public NVIDIA spec)
        bw_efficiency=0.6,
        activation_traffic=18.0,
        param_traffic=4.0,
        mem_busy_w_at_max=2.5,
        cpu_core_busy_w_at_max=1.0,
        cpu_core_idle_w=0.08,
        cpu_v_ratio=1.5,
        step_overhead_s=0.025,
        load_s_per_sample=0.00015,
        idle_w=6.3,  # near-idle rail sum 6.9 W [R7] incl. ~0.6 W idle cores; range 6-8 W (§3)
        thermal_c_per_w=1.5,
        throttle_c=90.0,
    ),
)

JETSON_ORIN_NANO = BoardSpec(
    name="jetson-orin-nano",
    devicetree_model="NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super",
    compatible="nvidia,p3768-0000+p3767-0005-super\0nvidia,p3767-0005\0nvidia,tegra234",
    soc="tegra234",
    jetpack="6.2",
    l4t_release=(
        "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
        "DATE: Wed Jan  8 01:49:37 UTC 2025"
    ),
    kernel_release="5.15.148-tegra",
    order_sensitive_devfreq=False,  # PM-QoS based stores never fail on ordering [R21]
    gpu_of_node_name="gpu",  # [R23 #668]
    gpu_device_dir="sys/devices/platform/bus@0/17000000.gpu",  # (unattributed) [R23 #668]
    gpu_of_node_dir="sys/firmware/devicetree/base/bus@0/gpu@17000000",
    devfreq_name="17000000.gpu",
    gpu_freqs_hz=_mhz(306, 408, 510, 612, 714, 816, 918, 1020),  # JP6.2 super (unattributed)
    sensors=(
        SensorSpec(
            driver="ina3221",
            path="sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1",  # [R17]
            channels={1: "VDD_IN", 2: "VDD_CPU_GPU_CV", 3: "VDD_SOC"},  # [R25]
        ),
    ),
    total_rail="VDD_IN",
    # Idle split from the minimal-idle report: VDD_IN 2.18 W, CPU_GPU_CV 0.37, SOC 0.945 [R25]
    rail_components={
        "VDD_IN": {"idle": 1.0, "cpu": 1.0, "gpu": 1.0, "mem": 1.0},
        "VDD_CPU_GPU_CV": {"idle": 0.17, "cpu": 1.0, "gpu": 1.0},
        "VDD_SOC": {"idle": 0.43, "mem": 0.5},
    },
    thermal_zones=_JP5_ZONES,
    cpu_cores=6,  # [R8]
    cpu_core="cortex-a78ae",  # [R8]
    # ESTIMATE values: 20 entries to 1510.4 MHz (count and ~1.5 GHz top: PT Table 2)
    cpu_freqs_hz=_ladder_khz(115200, 76800, 19, 1510400),
    emc_freqs_hz=_mhz(665.6, 2133, 3199),  # 3 entries (PT Table 2); 2133/3199 [R8 super]
    emc_debugfs_dir="sys/kernel/debug/bpmp/debug/clk/emc",  # [R19]
    physics=PhysicsSpec(
        gpu_cuda_cores=1024,  # PT Table 2
        gpu_flops_per_cycle=2048.0,
        eff_max=0.45,
        eff_half_batch=2.0,
        gpu_k_w_per_hz=1.51e-8,  # ESTIMATE: calibrated to 15-20 W at fmax (§3)
        util_min=0.0,
        util_half_batch=40.0,
        stall_activity=0.15,
        gpu_static_w=0.1,
        v_knee_hz=510_000_000,  # ESTIMATE
        v_ratio_at_fmax=1.3,
        emc_bus_bytes=16,  # 128-bit LPDDR5, 102 GB/s at 3199 MHz (public NVIDIA spec)
        bw_efficiency=0.6,
        activation_traffic=8.0,  # 2 MB L2 keeps more activations on chip (ESTIMATE)
        param_traffic=4.0,
        mem_busy_w_at_max=1.5,
        cpu_core_busy_w_at_max=0.6,
        cpu_core_idle_w=0.05,
        cpu_v_ratio=1.4,
        step_overhead_s=0.015,
        load_s_per_sample=0.00012,
        idle_w=3.2,  # idle VDD_IN 4.18-4.66 W with clocks maxed, 2.18 W minimal [R17][R25]
        thermal_c_per_w=2.5,
        throttle_c=87.0,  # third-party claim, unverified (jetson-facts §4.8)
    ),
)

JETSON_AGX_ORIN = BoardSpec(
    name="jetson-agx-orin",
    devicetree_model="Jetson AGX Orin Developer Kit",  # ESTIMATE
    compatible="nvidia,p3737-0000+p3701-0005\0nvidia,p3701-0005\0nvidia,tegra234",
    soc="tegra234",
    jetpack="5.1.2",
    l4t_release=(
        "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, "
        "DATE: Tue Aug  1 19:57:35 UTC 2023"
    ),
    kernel_release="5.10.120-tegra",
    order_sensitive_devfreq=False,  # [R21]
    gpu_of_node_name="ga10b",
    gpu_device_dir="sys/devices/17000000.ga10b",  # JP5 [R8][R6]
    gpu_of_node_dir="sys/firmware/devicetree/base/ga10b@17000000",
    devfreq_name="17000000.ga10b",
    gpu_freqs_hz=_TX2_LADDER,  # JP5 64GB list [R11]; PT Table 2: 13 GPU freqs to 1300 MHz
    sensors=(
        SensorSpec(
            driver="ina3221",
            path="sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3",  # [R12][R1]; X ESTIMATE
            channels={1: "VDD_GPU_SOC", 2: "VDD_CPU_CV", 3: "VIN_SYS_5V0"},  # [R12]
            voltages_mv={"VDD_GPU_SOC": 19000, "VDD_CPU_CV": 19000},  # ESTIMATE
        ),
        SensorSpec(
            driver="ina3221",
            path="sys/bus/i2c/drivers/ina3221/1-0041/hwmon/hwmon4",  # [R12][R1]; X ESTIMATE
            channels={1: "NC", 2: "VDDQ_VDD2_1V8AO", 3: "NC"},  # [R12]
        ),
    ),
    total_rail=None,  # no VDD_IN: jtop sums the rails [R1][R23 #344]
    rail_components={  # ESTIMATE split
        "VDD_GPU_SOC": {"idle": 0.4, "gpu": 1.0, "mem": 0.3},
        "VDD_CPU_CV": {"idle": 0.1, "cpu": 1.0},
        "VIN_SYS_5V0": {"idle": 0.4},
        "VDDQ_VDD2_1V8AO": {"idle": 0.1, "mem": 0.7},
    },
    thermal_zones=_JP5_ZONES,
    cpu_cores=12,  # [R8]; PT Table 2
    cpu_core="cortex-a78ae",  # [R8]
    cpu_freqs_hz=_ladder_khz(115200, 76800, 28, 2201600),  # ESTIMATE values; 29 entries (PT)
    emc_freqs_hz=_mhz(204, 665.6, 2133, 3199),  # ESTIMATE values; 4 entries to 3200 (PT); [R8]
    emc_debugfs_dir="sys/kernel/debug/bpmp/debug/clk/emc",  # [R19]
    physics=PhysicsSpec(
        gpu_cuda_cores=2048,  # PT Table 2
        gpu_flops_per_cycle=4096.0,
        eff_max=0.45,
        eff_half_batch=2.0,
        gpu_k_w_per_hz=3.19e-8,  # ESTIMATE: calibrated to 40-55 W at fmax (§3; PT 51.1 W MAXN)
        util_min=0.0,
        util_half_batch=40.0,
        stall_activity=0.15,
        gpu_static_w=1.75,
        v_knee_hz=522_750_000,  # ESTIMATE
        v_ratio_at_fmax=1.35,
        emc_bus_bytes=32,  # 256-bit LPDDR5, 204.8 GB/s (public NVIDIA spec)
        bw_efficiency=0.6,
        activation_traffic=8.0,
        param_traffic=4.0,
        mem_busy_w_at_max=4.0,
        cpu_core_busy_w_at_max=1.25,  # 12-core CPU stress ~15.2 W at MAXN [R24]
        cpu_core_idle_w=0.1,
        cpu_v_ratio=1.5,
        step_overhead_s=0.015,
        load_s_per_sample=0.0001,
        idle_w=8.5,  # ESTIMATE: range 8-12 W (§3)
        thermal_c_per_w=1.0,
        throttle_c=90.0,
    ),
)

BOARDS: dict[str, BoardSpec] = {
    b.name: b
    for b in (
        JETSON_NANO,
        JETSON_TX2_NX,
        JETSON_XAVIER_NX,
        JETSON_AGX_XAVIER,
        JETSON_ORIN_NANO,
        JETSON_AGX_ORIN,
    )
}

#: Ranges from jetson-facts.md §3 ("Twin defaults, ALL ESTIMATE"), mean W with ResNet18 training.
POWER_TARGETS_W: dict[str, dict[str, tuple[float, float]]] = {
    "jetson-nano": {"idle": (1.0, 1.5), "fmax": (6.0, 8.0), "fmin": (2.5, 3.5)},
    "jetson-tx2-nx": {"idle": (1.5, 2.0), "fmax": (8.0, 11.0), "fmin": (3.0, 4.0)},
    "jetson-xavier-nx": {"idle": (3.0, 4.0), "fmax": (10.0, 14.0), "fmin": (4.0, 6.0)},
    "jetson-agx-xavier": {"idle": (6.0, 8.0), "fmax": (25.0, 30.0), "fmin": (9.0, 12.0)},
    "jetson-orin-nano": {"idle": (3.0, 4.7), "fmax": (15.0, 20.0), "fmin": (6.0, 8.0)},
    "jetson-agx-orin": {"idle": (8.0, 12.0), "fmax": (40.0, 55.0), "fmin": (14.0, 18.0)},
}
