"""What the configuration's section modules share without importing each other: the bounds of
names, URIs and paths, and durations as the file writes them."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator

from virtcap.units import parse_duration

MAX_NAME_CHARS = 255
MAX_URI_CHARS = 1024
MAX_PATH_CHARS = 4096

Duration = Annotated[float, BeforeValidator(parse_duration)]
