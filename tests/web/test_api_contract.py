"""The API against its OpenAPI description: the same routes, the same documents, the same sizes and
durations, and no input that makes a 500."""

from __future__ import annotations

import json
import re
import string
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from tests.support.claims_client import WRITER, auth, call, write_config
from tests.support.serving import Server, running_server
from virtcap.commands.main import main
from virtcap.contract.openapi import openapi_document
from virtcap.units import parse_duration, parse_size
from virtcap.web.api import add_routes


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
        for path, operations in openapi_document()["paths"].items()
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
    assert document == json.loads(json.dumps(openapi_document()))


FIELDS = [
    "hypervisor", "vcpu", "pcpu", "memory", "disk", "ttl", "domain_uuid", "owner", "flavor", "extra_specs",
    "count",
]  # fmt: skip
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
SPEC_KEYS = [
    "hw:cpu_policy", "hw:cpu_thread_policy", "hw:emulator_threads_policy", "hw:cpu_dedicated_mask",
    "hw:numa_nodes", "hw:numa_cpus.0", "hw:numa_mem.0", "hw:mem_page_size", "pci_passthrough:alias",
    "hw:pci_numa_affinity_policy", "resources:VCPU", "resources:MEMORY_MB", "resources1:CUSTOM_X",
    "resources:FPGA", "hw:cpu_realtime",
]  # fmt: skip
SPEC_VALUES = [
    "dedicated", "shared", "mixed", "isolate", "require", "0", "1", "2", "-1", "0-1", "^0", "large", "small",
    "any", "2MB", "1GB", "x:1", "gpu:1", "required", "yes", "1024",
]  # fmt: skip
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
    "count": st.integers(-1, 1002) | json_values,
    "flavor": st.sampled_from(["m1.small", "m9.none", ""]) | st.none() | st.text(max_size=8) | json_values,
    "extra_specs": st.dictionaries(
        st.sampled_from(SPEC_KEYS) | st.text(max_size=8),
        st.sampled_from(SPEC_VALUES) | st.text(max_size=6),
        max_size=4,
    )
    | json_values,
}
bodies = st.fixed_dictionaries({}, optional=plausible) | st.dictionaries(
    st.sampled_from(FIELDS) | st.text(max_size=8), json_values, max_size=6
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_no_claim_body_makes_a_server_error(server: Server, body: dict[str, Any]) -> None:
    status, answer = call(server, "POST", "/api/v1/claims", body, auth())
    _release(server, status, answer)
    assert status in (201, 400, 409), (status, answer)
    assert str(status) in openapi_document()["paths"]["/api/v1/claims"]["post"]["responses"]
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
    status, answer = call(server, "POST", "/api/v1/claims", raw, auth())
    _release(server, status, answer)
    assert status in (201, 400, 409)


def _release(server: Server, status: int, answer: Any) -> None:
    """A claim a generated body made is released at once: the module's exporter is shared, and
    what one test holds must not be missing to the next, whatever their order."""
    if status == 201:
        deleted = call(server, "DELETE", f"/api/v1/claims/{answer['id']}", None, auth())[0]
        if deleted == 404:  # a TTL under a second may end, at the next expiry, before the delete
            expires_at = datetime.fromisoformat(answer["expires_at"].replace("Z", "+00:00"))
            assert expires_at <= datetime.now(UTC), answer
        else:
            assert deleted == 200, answer


# The description against the parser: what the API answers fits it, what it accepts the description
# accepts, and for sizes and durations, the other way round too, except for what only arithmetic
# can tell (ARITHMETIC below).

GIB = 1024**3
MIB = 1024**2
MAX_SIZE = 2**63 - 1


def validator(document: dict[str, Any], name: str) -> Draft202012Validator:
    schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    return Draft202012Validator(schema)


@pytest.fixture(scope="module")
def served(server: Server) -> dict[str, Any]:
    status, document = call(server, "GET", "/api/v1/openapi.json")
    assert status == 200
    assert document["openapi"].startswith("3.1.")
    return dict(document)


def test_every_schema_of_the_description_is_json_schema_2020_12() -> None:
    for schema in openapi_document()["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)


def test_the_description_fits_what_the_api_answers(server: Server, served: dict[str, Any]) -> None:
    request = {
        "hypervisor": "big",
        "vcpu": 2,
        "memory": "1.5GiB",
        "resources": {"DISK_GB": 3},
        "ttl": "1m",
        "domain_uuid": "6f1c3e0a-9a58-4c44-bc5e-1d7d0b9a6e2f",
        "owner": "contract",
    }
    validator(served, "ClaimBody").validate(request)
    status, created = call(server, "POST", "/api/v1/claims", request, auth())
    assert status == 201, created
    validator(served, "ClaimDocument").validate(created)
    assert created["vcpu"] == 2 and created["memory"] == 1536 * MIB and created["disk"] == 3 * GIB
    assert created["resources"] == {"VCPU": 2, "MEMORY_MB": 1536, "DISK_GB": 3}

    status, listing = call(server, "GET", "/api/v1/claims")
    assert status == 200
    validator(served, "ClaimList").validate(listing)
    assert created in listing["claims"]
    status, one = call(server, "GET", f"/api/v1/claims/{created['id']}")
    assert (status, one) == (200, created)
    status, capacity = call(server, "GET", "/api/v1/capacity")
    assert status == 200
    validator(served, "CapacityDocument").validate(capacity)

    status, refused = call(
        server, "POST", "/api/v1/claims", {"hypervisor": "small", "memory": "1TiB"}, auth()
    )
    assert status == 409 and refused["reasons"]
    validator(served, "ErrorBody").validate(refused)
    status, wrong = call(server, "POST", "/api/v1/claims", {"hypervisor": "big", "vcpu": -1}, auth())
    assert status == 400
    validator(served, "ErrorBody").validate(wrong)
    status, released = call(server, "DELETE", f"/api/v1/claims/{created['id']}", headers=auth())
    assert (status, released) == (200, created)
    status, missing = call(server, "GET", f"/api/v1/claims/{created['id']}")
    assert status == 404
    validator(served, "ErrorBody").validate(missing)


def test_the_description_fits_what_placements_answer(server: Server, served: dict[str, Any]) -> None:
    for request in (
        {"flavor": "m1.small", "count": 2},
        {"flavor": {"vcpu": 1, "memory": "1GiB", "disk": "1GiB"}, "count": 1000, "anti_affinity": True},
        {"flavor": "m1.small", "force_hosts": ["nowhere"], "ignore_hosts": ["big"]},
    ):
        validator(served, "PlacementBody").validate(request)
        status, answer = call(server, "POST", "/api/v1/placements", request)  # a read: no writer
        assert status == 200, answer
        validator(served, "PlacementAnswer").validate(answer)
    for wrong in ({"flavor": "m9"}, {"flavor": "m1.small", "count": 0}):
        status, refused = call(server, "POST", "/api/v1/placements", wrong)
        assert status == 400
        validator(served, "ErrorBody").validate(refused)


def test_the_description_fits_what_consolidation_plans_answer(server: Server, served: dict[str, Any]) -> None:
    # a read: no writer's credentials, though this server has writers
    for request in ({}, {"max_moves": 1, "keep_free": 1, "exclude_hosts": ["small"]}):
        validator(served, "ConsolidationBody").validate(request)
        status, answer = call(server, "POST", "/api/v1/plans/consolidation", request)
        assert status == 200, answer
        validator(served, "ConsolidationAnswer").validate(answer)
    for wrong in ({"exclude_hosts": ["nowhere"]}, {"max_moves": -1}, {"keep_free": 4}, {"plan": 1}):
        status, refused = call(server, "POST", "/api/v1/plans/consolidation", wrong)
        assert status == 400, refused
        validator(served, "ErrorBody").validate(refused)


def test_the_description_fits_what_count_claims_answer(server: Server, served: dict[str, Any]) -> None:
    # small: 44 vCPUs free, 14 instances of 3
    one = {"hypervisor": "small", "vcpu": 3, "ttl": "1m", "owner": "contract"}
    status, single = call(server, "POST", "/api/v1/claims", one, auth())
    assert status == 201, single
    validator(served, "ClaimDocument").validate(single)
    # a claim of one instance is the document it always was, and says so in two fields more (and
    # names its writer)
    assert set(single) == {
        "id", "hypervisor", "vcpu", "pcpu", "memory", "disk", "resources", "created_at", "expires_at",
        "domain_uuid", "owner", "flavor", "extra_specs", "count", "hypervisors", "created_by",
    }  # fmt: skip
    assert (single["count"], single["hypervisors"], single["vcpu"]) == (1, ["small"], 3)
    many = {**one, "count": 5}
    validator(served, "ClaimBody").validate(many)
    status, created = call(server, "POST", "/api/v1/claims", many, auth())
    assert status == 201, created
    validator(served, "ClaimDocument").validate(created)
    assert (created["count"], created["hypervisors"], created["hypervisor"]) == (5, ["small"] * 5, "small")
    assert created["vcpu"] == 3 and created["resources"] == {"VCPU": 3}  # per instance
    status, listing = call(server, "GET", "/api/v1/claims")
    validator(served, "ClaimList").validate(listing)
    assert created in listing["claims"] and single in listing["claims"]

    status, refused = call(server, "POST", "/api/v1/claims", {**one, "count": 9}, auth())
    assert status == 409, refused
    validator(served, "ErrorBody").validate(refused)
    assert (refused["requested"], refused["fitted"]) == (9, 8)
    assert refused["rejections"]["small"]["filter"] == "Placement"
    assert refused["reasons"]["small"] == ["Free vcpu 2.00 VCPU < requested 3 VCPU"]
    for claim_id in (single["id"], created["id"]):
        assert call(server, "DELETE", f"/api/v1/claims/{claim_id}", headers=auth())[0] == 200


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (0, "count: expected a number at least 1"),
        (-1, "count: expected a number at least 1"),
        (1001, "count: expected a number at most 1000"),
        (1.0, "count: expected a whole number"),
        (2.5, "count: expected a whole number"),
        ("2", "count: expected a whole number"),
        (True, "count: expected a whole number"),
        (None, "count: expected a whole number"),
    ],
)
def test_a_bad_count_gets_400_with_a_clear_message(
    server: Server, served: dict[str, Any], count: object, message: str
) -> None:
    body = {"hypervisor": "big", "vcpu": 1, "count": count}
    status, answer = call(server, "POST", "/api/v1/claims", body, auth())
    assert status == 400, answer
    assert message in answer["error"], answer
    if not isinstance(count, float) or not count.is_integer():  # 1.0 is JSON Schema's integer
        assert not validator(served, "ClaimBody").is_valid(body)


def test_a_domain_uuid_names_one_instance(server: Server, served: dict[str, Any]) -> None:
    uuid = "6f1c3e0a-9a58-4c44-bc5e-1d7d0b9a6e2f"
    body = {"hypervisor": "big", "vcpu": 1, "count": 2, "domain_uuid": uuid}
    status, answer = call(server, "POST", "/api/v1/claims", body, auth())
    assert status == 400, answer
    assert (
        "domain_uuid: a domain UUID names one domain; expected none beside a count above 1" in answer["error"]
    )
    assert not validator(served, "ClaimBody").is_valid(body)
    for fine in ({**body, "count": 1}, {**body, "domain_uuid": None}):
        assert validator(served, "ClaimBody").is_valid(fine)
        status, created = call(server, "POST", "/api/v1/claims", fine, auth())
        assert status == 201, created
        assert call(server, "DELETE", f"/api/v1/claims/{created['id']}", headers=auth())[0] == 200


def test_any_class_is_claimed_in_placement_units_and_answered_so(server: Server) -> None:
    status, created = call(
        server,
        "POST",
        "/api/v1/claims",
        {"hypervisor": "big", "resources": {"VCPU": 1, "MEMORY_MB": 512}, "ttl": "1s"},
        auth(),
    )
    assert status == 201, created
    assert (created["vcpu"], created["memory"], created["pcpu"], created["disk"]) == (1, 512 * MIB, 0, 0)
    assert created["resources"] == {"VCPU": 1, "MEMORY_MB": 512}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"resources": {"FPGA": 1}},
            "resources: expected one of VCPU, PCPU, MEMORY_MB, DISK_GB, VGPU or a CUSTOM_* class, got 'FPGA'",
        ),
        ({"resources": {"CUSTOM_fpga": 1}}, "resources: expected a custom resource class"),
        ({"resources": {"CUSTOM_FPGA": 1.5}}, "resources.CUSTOM_FPGA: expected a whole number, got 1.5"),
        ({"resources": {"CUSTOM_FPGA": "1"}}, "resources.CUSTOM_FPGA: expected a whole number"),
        ({"resources": {"CUSTOM_FPGA": True}}, "resources.CUSTOM_FPGA: expected a whole number"),
        ({"resources": {"CUSTOM_FPGA": -1}}, "resources: CUSTOM_FPGA: expected a whole number from 0 to"),
        ({"resources": {"VCPU": 1_000_001}}, "resources: VCPU: expected a whole number from 0 to 1000000"),
        ({"resources": {"MEMORY_MB": MAX_SIZE // MIB + 1}}, f"from 0 to {MAX_SIZE // MIB}, got"),
        (
            {"resources": {f"CUSTOM_{n}": 1 for n in range(65)}},
            "resources: expected at most 64 classes, got 65",
        ),
        ({"resources": [["VCPU", 1]]}, "resources: expected a mapping"),
        (
            {"resources": {"CUSTOM_FPGA": 0}},
            "asks for at least one of vcpu, pcpu, memory, disk or a class in resources",
        ),
        ({"resources": {}}, "asks for at least one of vcpu, pcpu, memory, disk or a class in resources"),
        ({"vcpu": 1, "resources": {"VCPU": 1}}, "vcpu and resources.VCPU ask for the same class"),
        (
            {"memory": 0, "resources": {"MEMORY_MB": 1}},
            "memory and resources.MEMORY_MB ask for the same class",
        ),
    ],
)
def test_a_bad_class_or_amount_gets_400_with_a_clear_message(
    server: Server, served: dict[str, Any], body: dict[str, Any], message: str
) -> None:
    body = {"hypervisor": "big", **body}
    status, answer = call(server, "POST", "/api/v1/claims", body, auth())
    assert status == 400, answer
    assert message in answer["error"], answer
    assert not validator(served, "ClaimBody").is_valid(body)


EMPTY = object()
NBSP, IDEOGRAPHIC_SPACE, EM_SPACE, BOM = "\u00a0", "\u3000", "\u2003", "\ufeff"
ARABIC_3, FULLWIDTH_1, MATH_1 = "\u0663", "\uff11", "\U0001d7cf"
SIZES_ACCEPTED: list[object] = [
    0, 1, MAX_SIZE, "0", "1", "512MiB", "512 MiB", " 4GiB ", "\t4GiB\n", "1.5GiB", "1.50KiB", "1B",
    "1.0B", "1024KiB", "0001GiB", "8388607TiB", str(MAX_SIZE), "0" * 60 + "1GiB", " " * 100 + "1GiB",
    f"{IDEOGRAPHIC_SPACE}1GiB{NBSP}", f"1{EM_SPACE}GiB", f"{ARABIC_3}GiB", f"{FULLWIDTH_1}KiB",
    f"{MATH_1}MiB", "1\x1cGiB",
]  # fmt: skip
SIZES_REFUSED: list[object] = [
    -1, MAX_SIZE + 1, 2**70, 1.5, True, None, [], {}, "", " ", "lots", "-4GiB", "+4GiB", "4gib",
    "4 GB", "4KB", "4GiBs", "4 G iB", ".5GiB", "5.GiB", "1e3", "0x10", "1,5GiB", "1_000",
    f"{BOM}1GiB", "0" * 61 + "1GiB", "1GiB B", "1GiB\n\n1",
]  # fmt: skip
SIZES_ARITHMETIC: list[object] = [
    "1.3KiB",  # not whole bytes
    "0.5B",
    "1.1",
    "8388608TiB",  # more than 2^63-1 bytes
    str(MAX_SIZE + 1),
    1.0,  # a JSON number with a fraction: JSON Schema's integer, not a size
    1000.0,
]
DURATIONS_ACCEPTED: list[object] = [
    1, 0.5, 1e-9, 3600, 31_536_000, "1s", "5m", "1h", "1m30s", "500ms", " 15m ", "0.5s", "0s1ms",
    "1h0m", "8760h", f"{ARABIC_3}s", f"{IDEOGRAPHIC_SPACE}1m{IDEOGRAPHIC_SPACE}", None, EMPTY,
]  # fmt: skip
DURATIONS_REFUSED: list[object] = [
    0, -1, 0.0, 31_536_001, True, [], "", "1", "1 s", "1d", "1S", "s", "1.s", ".5s", "-1s", "1h30",
    "0s", "0m0s", "0.000ms", f"{BOM}1s", "0" * 63 + "1s",
]  # fmt: skip
DURATIONS_ARITHMETIC = ["8761h", "525601m", "8760h1s"]  # more than a year, in parts


def parsed(server: Server, body: dict[str, Any]) -> bool:
    """Whether the API took the body's values (the claim may still not fit, or be longer than
    this server's claims.max_ttl, which the description cannot know)."""
    status, answer = call(server, "POST", "/api/v1/claims", body, auth())
    _release(server, status, answer)
    assert status in (201, 400, 409), (status, answer)
    return status != 400 or "(claims.max_ttl)" in answer["error"]


def size_body(key: str, value: object) -> dict[str, Any]:
    return {"hypervisor": "big", "vcpu": 1, key: value, "ttl": "1s"}


def ttl_body(value: object) -> dict[str, Any]:
    body: dict[str, Any] = {"hypervisor": "big", "vcpu": 1}
    if value is not EMPTY:
        body["ttl"] = value
    return body


@pytest.mark.parametrize("key", ["memory", "disk"])
def test_the_description_takes_exactly_the_sizes_the_api_takes(
    server: Server, served: dict[str, Any], key: str
) -> None:
    schema = validator(served, "ClaimBody")
    for value in SIZES_ACCEPTED:
        body = size_body(key, value)
        assert (schema.is_valid(body), parsed(server, body)) == (True, True), value
    for value in SIZES_REFUSED:
        body = size_body(key, value)
        assert (schema.is_valid(body), parsed(server, body)) == (False, False), value
    for value in SIZES_ARITHMETIC:  # the description says so in words
        body = size_body(key, value)
        assert (schema.is_valid(body), parsed(server, body)) == (True, False), value


def test_the_description_takes_exactly_the_durations_the_api_takes(
    server: Server, served: dict[str, Any]
) -> None:
    schema = validator(served, "ClaimBody")
    for value in DURATIONS_ACCEPTED:
        assert (schema.is_valid(ttl_body(value)), parsed(server, ttl_body(value))) == (True, True), value
    for value in DURATIONS_REFUSED:
        assert (schema.is_valid(ttl_body(value)), parsed(server, ttl_body(value))) == (False, False), value
    for value in DURATIONS_ARITHMETIC:
        assert (schema.is_valid(ttl_body(value)), parsed(server, ttl_body(value))) == (True, False), value


def test_the_description_takes_exactly_the_class_names_the_api_takes(
    server: Server, served: dict[str, Any]
) -> None:
    schema = validator(served, "ClaimBody")
    for name in ["VCPU", "PCPU", "MEMORY_MB", "DISK_GB", "CUSTOM_FPGA", "CUSTOM_1", "CUSTOM_" + "A" * 248]:
        body = {"hypervisor": "big", "resources": {name: 1}, "ttl": "1s"}
        assert (schema.is_valid(body), parsed(server, body)) == (True, True), name
    for name in ["", "FPGA", "vcpu", "Vcpu", "CUSTOM_", "CUSTOM_fpga", "CUSTOM_A-B", "CUSTOM_" + "A" * 249,
                 "VCPU\n", "CUSTOM_A\n", " VCPU", "MEMORY_GB"]:  # fmt: skip
        body = {"hypervisor": "big", "resources": {name: 1}, "ttl": "1s"}
        assert (schema.is_valid(body), parsed(server, body)) == (False, False), name


def test_the_description_takes_a_flavor_or_extra_specs_as_the_api_does(
    server: Server, served: dict[str, Any]
) -> None:
    schema = validator(served, "ClaimBody")
    taken: list[dict[str, Any]] = [
        {"flavor": "m1.small"},
        {"flavor": "m1.small", "ttl": "1s", "owner": "x"},
        {"vcpu": 1, "extra_specs": {"hw:cpu_policy": "shared"}},
        {"vcpu": 2, "memory": "1GiB", "disk": "1GiB", "extra_specs": {"resources:CUSTOM_X": "0"}},
        {"flavor": None, "vcpu": 1, "extra_specs": {}, "pcpu": 0},
    ]
    for fields in taken:
        body = {"hypervisor": "big", **fields}
        assert (schema.is_valid(body), parsed(server, body)) == (True, True), body
    refused: list[dict[str, Any]] = [
        {"flavor": "m1.small", "vcpu": 1},
        {"flavor": "m1.small", "resources": {}},
        {"flavor": "m1.small", "extra_specs": {}},
        {"flavor": ""},
        {"extra_specs": {"hw:cpu_policy": "shared"}},
        {"vcpu": 0, "memory": "1GiB", "extra_specs": {"hw:cpu_policy": "shared"}},
        {"vcpu": 1, "pcpu": 0, "extra_specs": {"hw:cpu_policy": "shared"}},
        {"vcpu": 1, "resources": {"CUSTOM_X": 1}, "extra_specs": {"hw:cpu_policy": "shared"}},
        {"vcpu": 1, "extra_specs": {f"k{n}": "v" for n in range(129)}},
        {"vcpu": 1, "extra_specs": {"k": "v" * 256}},
        {"vcpu": 1, "extra_specs": {"k": 1}},
    ]
    for fields in refused:
        body = {"hypervisor": "big", **fields}
        assert (schema.is_valid(body), parsed(server, body)) == (False, False), body


# Sizes and durations from the characters that matter, in-process: the parser behind the API
# (units.py) against the patterns, for many more spellings than a server can be asked about.
QUANTITY_CHARACTERS = [
    "0", "1", "5", ".", " ", "\t", "\n", "B", "K", "M", "G", "T", "i", "m", "s", "h", "-", "e",
    ARABIC_3, "\u0660", FULLWIDTH_1, MATH_1, NBSP, IDEOGRAPHIC_SPACE, BOM, "\x1c",
]  # fmt: skip
quantity_text = st.text(alphabet=st.sampled_from(QUANTITY_CHARACTERS), max_size=12)
SIZE_ARITHMETIC_MESSAGES = ("expected a whole number of bytes", "expected a size of at most")
DURATION_ARITHMETIC_MESSAGES = ("at most 1 year",)


def schema_takes(schema: dict[str, Any], value: str) -> bool:
    return any(re.search(branch["pattern"], value) for branch in schema["anyOf"] if "pattern" in branch)


@settings(max_examples=2000, deadline=None)
@given(
    text=quantity_text | quantity_text.map(lambda text: text + "GiB") | quantity_text.map(lambda t: t + "s")
)
def test_the_patterns_take_what_the_parsers_take(text: str) -> None:
    schemas = openapi_document()["components"]["schemas"]
    for parse, schema, arithmetic in (
        (parse_size, schemas["Size"], SIZE_ARITHMETIC_MESSAGES),
        (parse_duration, schemas["Duration"], DURATION_ARITHMETIC_MESSAGES),
    ):
        try:
            parse(text)
        except ValueError as error:
            # the pattern refuses it, or only arithmetic can tell, as the description says
            assert not schema_takes(schema, text) or any(m in str(error) for m in arithmetic), (text, error)
        else:
            assert schema_takes(schema, text), text


plausible_resources = st.dictionaries(
    st.sampled_from(["VCPU", "PCPU", "MEMORY_MB", "DISK_GB", "CUSTOM_FPGA", "CUSTOM_", "FPGA", "vcpu", ""])
    | st.text(max_size=8),
    st.integers(-2, 2**64) | json_values,
    max_size=4,
)
bodies_with_resources = st.fixed_dictionaries(
    {}, optional={**plausible, "resources": plausible_resources | json_values}
)
bodies_with_specs = st.fixed_dictionaries(
    {
        "hypervisor": st.sampled_from(["mixed", "big", "any"]),
        "vcpu": st.integers(0, 8),
        "extra_specs": st.dictionaries(st.sampled_from(SPEC_KEYS), st.sampled_from(SPEC_VALUES), max_size=4),
    },
    optional={
        "memory": st.sampled_from(["1GiB", "512MiB", "0"]),
        "disk": st.sampled_from(["10GiB", "0"]),
        "pcpu": st.integers(0, 2),
        "resources": st.sampled_from([{}, {"CUSTOM_X": 1}]),
        "flavor": st.sampled_from(["m1.small", "m9.none"]) | st.none(),
        "ttl": st.just("1s"),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies | bodies_with_resources | bodies_with_specs)
def test_the_description_takes_every_body_the_api_takes(
    server: Server, served: dict[str, Any], body: dict[str, Any]
) -> None:
    status, answer = call(server, "POST", "/api/v1/claims", body, auth())
    _release(server, status, answer)
    assert status in (201, 400, 409), (status, answer)
    if status in (201, 409):
        assert validator(served, "ClaimBody").is_valid(body), (body, status, answer)
    if status != 201:
        validator(served, "ErrorBody").validate(answer)


def test_virtcap_claim_asks_for_any_class(
    server: Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VIRTCAP_PASSWORD", WRITER[1])
    common = ["claim", "create", "--url", server.base_url, "--user", WRITER[0], "--hypervisor", "big"]
    assert main([*common, "--resource", "VCPU=1", "--resource", "MEMORY_MB=256", "--ttl", "1s"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["resources"] == {"VCPU": 1, "MEMORY_MB": 256} and created["memory"] == 256 * MIB

    assert main([*common, "--vcpu", "1", "--resource", "VCPU=1"]) == 1
    assert "vcpu and resources.VCPU ask for the same class" in capsys.readouterr().err
    assert main([*common, "--resource", "CUSTOM_X=1", "--resource", "CUSTOM_X=2"]) == 2
    assert "CUSTOM_X given more than once" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*common, "--resource", "VCPU"])
    assert "expected CLASS=N" in capsys.readouterr().err
