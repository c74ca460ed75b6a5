"""The demo fleet's figures worked out by hand: per-group totals and headroom, compute-05's maintenance."""

from __future__ import annotations

from virtcap.demo import demo_maintenance_end
from virtcap.units import format_utc

# Each hypervisor's (limit, used, free), the sums' terms (memory in GiB):
#               vcpu             pcpu         memory
#   compute-01  128  75   53     0  0  0      255.5 150  105.5
#   compute-02   64  71   -7     0  0  0      191.5 142   49.5   (vCPUs past its limit)
#   compute-03  192  86  106     0  0  0      186   172   14     (ratio 1.5, 4 GiB reserved)
#   compute-04  256 200   56     0  0  0      767.5 592  175.5
#   compute-06   96  66   30     0  0  0      440   348   92     (8 GiB reserved)
#   compute-08   16  14    2    28 14 14      240   196   44     (16 GiB reserved)
#   compute-09    0   0    0    28 12 16      112    80   32
#   compute-10   96   6   90    24  2 22      240    24  216
#   compute-11  192  20  172     0  0  0      191.5  10  181.5
# (compute-05, in maintenance, 16 3 13, 2 1 1, 63.5 8 55.5: in no sum)
Totals = dict[str, tuple[float, ...]]


GROUP_TOTALS: dict[tuple[str, str], Totals] = {
    # az-1: 01 04 06 08 09 10. vCPU 128+256+96+16+0+96, 75+200+66+14+0+6; pCPU 28+28+24,
    # 14+12+2; memory 255.5+767.5+440+240+112+240, 150+592+348+196+80+24
    ("availability_zone", "az-1"): {
        "vcpu": (592, 361, 231),
        "pcpu": (80, 28, 52),
        "memory": (2055, 1390, 665),
    },
    # az-2: 02 03 11. vCPU 64+192+192, 71+86+20, -7+106+172; memory 191.5+186+191.5, 142+172+10
    ("availability_zone", "az-2"): {"vcpu": (448, 177, 271), "pcpu": (0, 0, 0), "memory": (569, 324, 245)},
    # 01 06: vCPU 128+96, 75+66; memory 255.5+440, 150+348
    ("aggregate", "windows"): {"vcpu": (224, 141, 83), "pcpu": (0, 0, 0), "memory": (695.5, 498, 197.5)},
    # 08 09 10: vCPU 16+0+96, 14+0+6; pCPU 28+28+24; memory 240+112+240, 196+80+24
    ("aggregate", "pinned"): {"vcpu": (112, 20, 92), "pcpu": (80, 28, 52), "memory": (592, 300, 292)},
    # 09 10: vCPU 0+96, 0+6; pCPU 28+24, 12+2; memory 112+240, 80+24
    ("aggregate", "gpu"): {"vcpu": (96, 6, 90), "pcpu": (52, 14, 38), "memory": (352, 104, 248)},
    # 01 04: vCPU 128+256, 75+200; memory 255.5+767.5, 150+592
    ("rack", "r1"): {"vcpu": (384, 275, 109), "pcpu": (0, 0, 0), "memory": (1023, 742, 281)},
    # 06 08 09 10: vCPU 96+16+0+96, 66+14+0+6; memory 440+240+112+240, 348+196+80+24
    ("rack", "r2"): {"vcpu": (208, 86, 122), "pcpu": (80, 28, 52), "memory": (1032, 648, 384)},
    ("rack", "r3"): {"vcpu": (448, 177, 271), "pcpu": (0, 0, 0), "memory": (569, 324, 245)},  # = az-2
}


# Each hypervisor's schedulable instances of a flavor (one audit; 0 for compute-05, in maintenance):
#               m1.small  b1.large  d1.pinned  w1.medium  p1.8xlarge
#   compute-01      8        13         0          8          0      (80 GiB of disk free)
#   compute-02      0         0         0          0          0      (no vCPU free)
#   compute-03      3         1         0          0          0
#   compute-04      7        14         0          0          0
#   compute-06      6         7         0          6          0
#   compute-08      2         0        14          0          0
#   compute-09      0         0        16          0          0
#   compute-10     90        22        22          0          0
#   compute-11     10        22         0          0          0      (100 GiB of disk free)
GROUP_HEADROOM = {
    ("availability_zone", "az-1"): {"m1.small": 113, "b1.large": 56, "d1.pinned": 52, "w1.medium": 14},
    ("availability_zone", "az-2"): {"m1.small": 13, "b1.large": 23, "d1.pinned": 0, "w1.medium": 0},
    ("aggregate", "windows"): {"m1.small": 14, "b1.large": 20, "d1.pinned": 0, "w1.medium": 14},
    ("aggregate", "pinned"): {"m1.small": 92, "b1.large": 22, "d1.pinned": 52, "w1.medium": 0},
    ("aggregate", "gpu"): {"m1.small": 90, "b1.large": 22, "d1.pinned": 38, "w1.medium": 0},
    ("rack", "r1"): {"m1.small": 15, "b1.large": 27, "d1.pinned": 0, "w1.medium": 8},
    ("rack", "r2"): {"m1.small": 98, "b1.large": 29, "d1.pinned": 52, "w1.medium": 6},
    ("rack", "r3"): {"m1.small": 13, "b1.large": 23, "d1.pinned": 0, "w1.medium": 0},
}


def compute_05_maintenance(*loaded_at: float) -> set[str]:
    """compute-05's reason with the end its maintenance had in a demo loaded at any of these times
    (a run that crosses midnight UTC may load the demo on either side)."""
    ends = {format_utc(demo_maintenance_end(when).timestamp()) for when in loaded_at}
    return {f"kernel upgrade (until {end}) (set by the configuration)" for end in ends}
