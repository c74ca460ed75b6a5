"""The API against its OpenAPI description: the same routes, and no input that makes a 500."""

from __future__ import annotations

import json
import string
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.claims_client import auth, call, write_config
from tests.serving import Server, running_server
from virtcap.web.api import add_routes
from virtcap.web.openapi import OPENAPI


def test_the_description_lists_exactly_the_routes_the_server_has() -> None:
    app = web.Application()
    add_routes(app)
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    described = {
        (method, path)
        for path, operations in OPENAPI["paths"].items()
        for method in operations
        if method != "parameters"
    }
    assert served == described


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("contract")
    with running_server(["--config", str(write_config(directory))], directory) as running:
        yield running


def test_the_served_description_is_the_module(server: Server) -> None:
    status, document = call(server, "GET", "/api/v1/openapi.json")
    assert status == 200
    assert document == json.loads(json.dumps(OPENAPI))


FIELDS = ["hypervisor", "vcpu", "pcpu", "memory", "disk", "ttl", "domain_uuid", "owner"]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()  # NaN and infinities too: Python's json writes them, and used to read them back
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)
plausible = {
    "hypervisor": st.sampled_from(["mixed", "big", "small", "any", "", "nowhere"]) | st.text(max_size=10),
    "vcpu": st.integers(-5, 10**7) | json_values,
    "pcpu": st.integers(-2, 4) | json_values,
    "memory": st.sampled_from(["1GiB", "512MiB", "0", "-1GiB", "1.5GiB", "9TiB", "1e3"])
    | st.integers(-1, 2**63),
    "disk": st.sampled_from(["10GiB", "0", "x"]) | st.integers(-1, 2**40) | json_values,
    "ttl": st.sampled_from(["1s", "5m", "2h", "0s", "-1s"]) | st.floats() | json_values,
    "domain_uuid": st.uuids().map(str) | st.text(max_size=40),
    "owner": st.text(max_size=300),
}
bodies = st.fixed_dictionaries({}, optional=plausible) | st.dictionaries(
    st.sampled_from(FIELDS) | st.text(max_size=8), json_values, max_size=6
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_no_claim_body_makes_a_server_error(server: Server, body: dict[str, Any]) -> None:
    status, answer = call(server, "POST", "/api/v1/claims", body, auth())
    assert status in (201, 400, 409), (status, answer)
    assert str(status) in OPENAPI["paths"]["/api/v1/claims"]["post"]["responses"]
    if status != 201:
        assert isinstance(answer, dict) and answer["error"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(claim_id=st.text(alphabet=string.printable, min_size=1, max_size=60))
def test_no_claim_id_makes_a_server_error(server: Server, claim_id: str) -> None:
    path = "/api/v1/claims/" + urllib.parse.quote(claim_id, safe="")
    assert call(server, "GET", path)[0] in (404, 400)
    assert call(server, "DELETE", path, headers=auth())[0] in (404, 400)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_no_raw_body_makes_a_server_error(server: Server, raw: bytes) -> None:
    assert call(server, "POST", "/api/v1/claims", raw, auth())[0] in (201, 400, 409)
