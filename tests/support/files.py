"""Where the tests find the repository's files and their own."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's top folder."""
FIXTURES = Path(__file__).resolve().parent / "fixtures"
"""Files the tests read as they are: libvirt test-driver node descriptions."""
