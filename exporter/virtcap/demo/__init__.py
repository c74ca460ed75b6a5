"""The bundled demo fleet: libvirt test-driver node files and the configuration that audits them."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from virtcap.config import Config, parse_config

DEMO_DIR = Path(__file__).resolve().parent
DEMO_CONFIG = DEMO_DIR / "demo.yaml"
PLACEHOLDER = "@DEMO_DIR@"
MAINTENANCE_END = "@DEMO_MAINTENANCE_END@"
MAINTENANCE_DAYS = 7


def demo_maintenance_end(now: float) -> datetime:
    """When compute-05's maintenance ends: midnight UTC, MAINTENANCE_DAYS after the day the demo's
    configuration is loaded (`now`). Ahead whenever the demo runs, where a date written in the file
    would pass, and the same all day long."""
    today = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=MAINTENANCE_DAYS)


def demo_config_text(now: float | None = None) -> str:
    """demo.yaml as loaded: its node files in this folder, wherever the package is installed, and
    its maintenance's end ahead of `now` (by default, the time of loading)."""
    end = demo_maintenance_end(time.time() if now is None else now)
    text = DEMO_CONFIG.read_text(encoding="utf-8")
    return text.replace(PLACEHOLDER, str(DEMO_DIR)).replace(MAINTENANCE_END, end.isoformat())


def demo_config(now: float | None = None) -> Config:
    return parse_config(demo_config_text(now), source=str(DEMO_CONFIG))
