"""A request's body as the API reads it: bounded in size, time and depth, strict JSON, and the JSON
error answers (virtcap.contract.bodies.ErrorBody) for every way it can fail."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from virtcap.contract.bodies import BODY_TIMEOUT_SECONDS, MAX_BODY_BYTES, MAX_BODY_DEPTH, ErrorBody


def json_error(
    status: type[web.HTTPException], message: str, headers: dict[str, str] | None = None, **extra: Any
) -> web.HTTPException:
    """An error answer: `{"error": message}`, with `extra` (reasons) as given."""
    body = ErrorBody(error=message, **extra).model_dump(mode="json", exclude_unset=True)
    return status(text=json.dumps(body), content_type="application/json", headers=headers)


def _too_large(limit: int) -> web.HTTPException:
    body = ErrorBody(error=f"the body is larger than {limit} bytes").model_dump(exclude_unset=True)
    return web.HTTPRequestEntityTooLarge(limit, text=json.dumps(body), content_type="application/json")


async def read_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The whole body, however it arrives (in pieces, chunked), within a bound of size and time.

    `request.content.read(n)` returns what has arrived so far, which may be a part of the body.
    """
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_SECONDS):
            while chunk := await request.content.readany():
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise json_error(
            web.HTTPRequestTimeout, f"the body did not arrive within {BODY_TIMEOUT_SECONDS:g}s"
        ) from None
    except HttpProcessingError as error:  # a broken chunked encoding, a body cut short
        raise json_error(web.HTTPBadRequest, f"the body could not be read: {error.message}") from None
    except web.RequestPayloadError as error:  # a Content-Encoding that does not decode
        raise json_error(web.HTTPBadRequest, f"the body could not be read: {error}") from None
    return b"".join(chunks)


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:40]} is out of range for a number")
    return number


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_json(raw: bytes) -> Any:
    """Strict JSON: no NaN or Infinity (Python's json accepts them), no number that overflows to
    infinity, and no nesting deeper than MAX_BODY_DEPTH."""
    try:
        document = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise json_error(web.HTTPBadRequest, "the body is not JSON we accept: nested too deeply") from None
    except ValueError as error:  # also JSONDecodeError, UnicodeDecodeError and over-long integers
        raise json_error(web.HTTPBadRequest, f"the body is not JSON: {error}") from None
    if _depth(document) > MAX_BODY_DEPTH:
        raise json_error(web.HTTPBadRequest, "the body is not JSON we accept: nested too deeply")
    return document


def _depth(document: Any) -> int:
    deepest = 0
    pending: list[tuple[Any, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        deepest = max(deepest, depth)
        if isinstance(value, dict):
            pending.extend((child, depth + 1) for child in value.values())
        elif isinstance(value, list):
            pending.extend((child, depth + 1) for child in value)
    return deepest
