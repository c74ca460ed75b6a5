"""What every request body may be and what every refusal answers: the bounds the server holds a
body to (413, 408, 400) and ErrorBody, the document of each 4xx and 503."""

from __future__ import annotations

from pydantic import BaseModel, Field

from virtcap.contract.placements import PlacementRejection

MAX_BODY_BYTES = 16 * 1024
BODY_TIMEOUT_SECONDS = 5.0
"""How long a claim body may take to arrive once the headers are in: a client that stalls is
answered 408 rather than holding a connection and a handler for ever."""
MAX_BODY_DEPTH = 8
"""A claim is a flat object: deeper JSON is refused, whatever the recursion limit allows."""


class ErrorBody(BaseModel):
    """Why a request was refused."""

    error: str = Field(description="What was wrong, in one line: the key and what was expected.")
    reasons: dict[str, list[str]] = Field(
        default_factory=dict,
        description="A claim that does not fit (409): per hypervisor tried, every failing class "
        "in Nova's words, such as `Free memory 1024.00 MiB < requested 2048 MiB`, and for a claim "
        "with extra specs why no NUMA cell or device holds it, such as "
        "`NUMA: cell 0: 2 free dedicated CPUs < 4 requested`.",
    )
    rejections: dict[str, PlacementRejection] = Field(
        default_factory=dict,
        description="A claim that does not fit (409): per hypervisor, as a dry-run placement gives "
        "them, the first filter that refused the instance that found no host and its reasons.",
    )
    requested: int | None = Field(
        default=None, description="A claim that does not fit (409): how many instances it asked for."
    )
    fitted: int | None = Field(
        default=None,
        description="A claim that does not fit (409): how many of its instances would have been placed, "
        "one by one, before the first that found no host; none of them is held.",
    )
