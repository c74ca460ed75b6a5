"""The bundled demo fleet: libvirt test-driver node files and the configuration that audits them."""

from __future__ import annotations

from pathlib import Path

from virtcap.config import Config, parse_config

DEMO_DIR = Path(__file__).resolve().parent
DEMO_CONFIG = DEMO_DIR / "demo.yaml"
PLACEHOLDER = "@DEMO_DIR@"


def demo_config() -> Config:
    """demo.yaml names its node files relative to this folder, wherever the package is installed."""
    text = DEMO_CONFIG.read_text(encoding="utf-8").replace(PLACEHOLDER, str(DEMO_DIR))
    return parse_config(text, source=str(DEMO_CONFIG))
