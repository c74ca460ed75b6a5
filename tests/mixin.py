"""The alerting mixin in alerts/: its folder, the alerts' configurable `for` durations, and
jsonnet to render its files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

ALERTS = Path(__file__).resolve().parent.parent / "alerts"
FOR_KEYS = (
    "overcommitted",
    "nearlyExhausted",
    "memoryPressure",
    "fleetHostFailure",
    "flavorHeadroom",
    "hugepagesExhausted",
    "pciDeviceHeadroom",
    "vgpuHeadroom",
    "forecast",
    "auditFailing",
    "auditStale",
    "inventoryRefused",
    "exporterDown",
)


def jsonnet(source: str, config: dict[str, Any] | None = None) -> str:
    command = ["jsonnet", "-S", "-J", str(ALERTS), str(ALERTS / source)]
    if config is not None:
        command += ["--tla-code", f"config={json.dumps(config)}"]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout
