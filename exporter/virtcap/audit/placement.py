"""Placement in, provider trees out: what OpenStack Placement holds for the audited hypervisors.

Blocking (urllib3, with keystoneauth1's token and endpoint: audit/placement_http.py): the service
runs `PlacementReader.read_trees` in a thread.
A round makes one `GET /resource_providers` for the whole fleet (every provider with its parent),
then per provider of a matched tree its inventories and its allocations, and `GET
/allocations/{consumer}` for at most `max_described` consumers the caller asks about (their
consumer type and project, remembered while they hold allocations): at most 2 requests per
provider, plus 1, plus the consumers described.

Anything that goes wrong (Placement or Keystone down, hung, refusing the credentials, answering an
error, HTML or JSON of another shape) raises `PlacementError` with a one-line message; a secret is
never in it, and the keystoneauth1 or urllib3 exception it replaces is not chained to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import typing
import uuid as uuid_module
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

from keystoneauth1 import plugin, token_endpoint
from keystoneauth1.identity import v3

from virtcap.audit.placement_error import PlacementError
from virtcap.audit.placement_http import Answer, PlacementHttp, first_line
from virtcap.config.placement import NOAUTH_TOKEN, SECRET_NAMES, PlacementAuth, PlacementSection
from virtcap.model.placement_drift import Consumer, ProviderInventory, ProviderTree

MAX_DESCRIBED = 100
"""Consumers described (`GET /allocations/{consumer}`) per round at most; the others next round."""
CONCURRENCY = 4
"""Requests in flight at once: enough to hide Placement's latency, few enough for a small API."""
REQUEST_KINDS = ("providers", "inventories", "allocations", "consumer")

DescribeWanted = Callable[[str, str], bool] | AbstractSet[str]
"""Which consumers to describe: (hypervisor, consumer UUID) -> whether, or a set of UUIDs."""

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class PlacementRead:
    """One round's trees, and what it cost."""

    trees: Mapping[str, ProviderTree | None]
    """Per hypervisor asked about, its provider tree; None where no provider matched it."""
    requests: Mapping[str, int]
    """Requests made to Placement, per kind (REQUEST_KINDS)."""
    seconds: Mapping[str, float]
    """Their durations summed, per kind."""
    providers: int
    """Providers read (roots and descendants of the matched trees)."""
    undescribed: int = 0
    """Consumers asked about but left for a later round (over `max_described`)."""

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())


@dataclass(frozen=True, slots=True)
class _Provider:
    uuid: str
    name: str
    parent: str | None


@dataclass(frozen=True, slots=True)
class _Description:
    consumer_type: str | None
    project_id: str | None


def read_secret(auth: PlacementAuth, name: str) -> str:
    """A secret from `<name>_file` (without its trailing newline) or `<name>_env`, read now."""
    path = getattr(auth, f"{name}_file")
    if path is not None:
        try:
            value = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else "not UTF-8 text"
            raise PlacementError(f"placement.auth.{name}_file: cannot read {path}: {reason}") from None
        if not value:
            raise PlacementError(f"placement.auth.{name}_file: {path} is empty; expected the {name}")
        return value
    variable = getattr(auth, f"{name}_env")
    value = os.environ.get(variable or "", "").rstrip("\r\n")
    if not value:
        raise PlacementError(f"placement.auth.{name}_env: ${variable} is not set; expected the {name}")
    return value


def auth_plugin(section: PlacementSection) -> tuple[plugin.BaseAuthPlugin, tuple[str, ...]]:
    """keystoneauth1's plugin for `auth.type`, and the secrets it was given (kept out of messages).

    `none` is keystoneauth1's `admin_token` plugin (token_endpoint.Token): the endpoint and the
    static token Placement's noauth2 middleware asks for, and no Keystone."""
    auth = section.auth
    if auth.type == "none":
        return token_endpoint.Token(section.endpoint, NOAUTH_TOKEN), ()
    secrets = {name: read_secret(auth, name) for name in SECRET_NAMES if _configured(auth, name)}
    if auth.auth_url is None:  # the configuration's validation requires it: a reader made otherwise
        raise PlacementError(f"placement.auth.auth_url: expected Keystone's URL with auth.type {auth.type}")
    auth_url = auth.auth_url
    if auth.type == "password":
        identity: plugin.BaseAuthPlugin = v3.Password(
            auth_url=auth_url,
            username=auth.username,
            password=secrets["password"],
            user_domain_name=auth.user_domain_name,
            project_name=auth.project_name,
            project_domain_name=auth.project_domain_name,
        )
    elif auth.type == "application_credential":
        identity = v3.ApplicationCredential(
            auth_url=auth_url,
            application_credential_id=auth.application_credential_id,
            application_credential_secret=secrets["application_credential_secret"],
        )
    else:
        identity = v3.Token(
            auth_url=auth_url,
            token=secrets["token"],
            project_name=auth.project_name,
            project_domain_name=auth.project_domain_name,
        )
    return identity, tuple(secrets.values())


def _configured(auth: PlacementAuth, name: str) -> bool:
    return getattr(auth, f"{name}_file") is not None or getattr(auth, f"{name}_env") is not None


class PlacementReader:
    """A keystoneauth1 session to one Placement (config's `placement:`), read a round at a time.

    Its secrets are read when it is made (PlacementError if one cannot be). Rounds do not overlap:
    a second caller waits for the first one's round to end."""

    def __init__(
        self,
        section: PlacementSection,
        *,
        concurrency: int = CONCURRENCY,
        max_described: int = MAX_DESCRIBED,
    ) -> None:
        auth, self._secrets = auth_plugin(section)
        where = section.endpoint or "Placement (the Keystone catalog's)"
        if section.auth.type != "none":
            where += " or Keystone"
        self._http = PlacementHttp(section, auth, where=where, concurrency=concurrency)
        self._concurrency = max(1, concurrency)
        self._max_described = max(0, max_described)
        self._described: dict[str, _Description] = {}
        """Consumers already described, while they hold allocations on a tree read."""
        self._made: dict[tuple[str, str], tuple[bytes, Any]] = {}
        """Per provider read last round and kind ("inventories", "allocations"), its answer's
        digest and what was made of it."""
        self._trees: dict[str, _Tree] = {}
        """Per root provider read last round, its tree and what it was made of."""
        self._round = threading.Lock()

    def close(self) -> None:
        self._http.close()

    def read_trees(
        self, hypervisors: Mapping[str, str], describe: DescribeWanted = frozenset()
    ) -> PlacementRead:
        """Per hypervisor (name -> its provider's name or UUID: `placement_provider`, else its
        hostname), its provider tree: root and descendants with their inventories, and every
        consumer allocated on it, summed over the tree per class; the consumers `describe` asks
        about (at most `max_described`, the others next round) with their type and project."""
        with self._round:
            counter = _Counter()
            try:
                return self._read(hypervisors, describe, counter)
            except PlacementError as error:
                error.requests = sum(counter.requests.values())
                raise
            except Exception as error:  # a boundary: nothing but PlacementError leaves a round
                failed = PlacementError(self._scrubbed(f"reading Placement failed: {first_line(error)}"))
                failed.requests = sum(counter.requests.values())
                raise failed from None

    def _read(
        self, hypervisors: Mapping[str, str], describe: DescribeWanted, counter: _Counter
    ) -> PlacementRead:
        try:
            self._http.begin()
        except PlacementError as error:
            raise PlacementError(self._scrubbed(str(error))) from None
        listed = _providers(self._get(counter, "providers", "/resource_providers"))
        by_uuid = {provider.uuid: provider for provider in listed}
        by_name = {provider.name: provider for provider in listed}
        children: dict[str, list[_Provider]] = {}
        for provider in listed:
            if provider.parent is not None:
                children.setdefault(provider.parent, []).append(provider)
        matched = {hypervisor: _match(wanted, by_uuid, by_name) for hypervisor, wanted in hypervisors.items()}
        members = {root.uuid: _subtree(root, children) for root in matched.values() if root is not None}
        to_read = sorted({provider.uuid for tree in members.values() for provider in tree})
        inventories, allocations = self._fan_out(
            [(uuid, "inventories") for uuid in to_read] + [(uuid, "allocations") for uuid in to_read],
            lambda job: self._read_provider(counter, *job),
        )
        # A provider deleted since the list (a compute node removed, a GPU gone) is left out; a
        # tree whose root went is as if no provider had matched its hypervisor this round.
        gone = {uuid for uuid in to_read if inventories[uuid] is None or allocations[uuid] is None}
        for hypervisor, root in matched.items():
            if root is not None and root.uuid in gone:
                matched[hypervisor] = None
        members = {
            root: [provider for provider in tree if provider.uuid not in gone]
            for root, tree in members.items()
            if root not in gone
        }
        made_of = {
            root: _MadeOf(
                tuple(provider.name for provider in tree),
                tuple(made[provider.uuid] for provider in tree for made in (inventories, allocations)),
            )
            for root, tree in members.items()
        }
        unchanged = {
            root: before
            for root, before in self._trees.items()
            if root in made_of and before.made_of.same(made_of[root])
        }
        summed = {
            root: unchanged[root].summed
            if root in unchanged
            else _consumers(allocations[provider.uuid] for provider in tree)
            for root, tree in members.items()
        }
        described, undescribed = self._describe(counter, matched, summed, describe)
        trees: dict[str, ProviderTree | None] = {}
        kept: dict[str, _Tree] = {}
        for hypervisor, root in matched.items():
            if root is None:
                trees[hypervisor] = None
                continue
            before = unchanged.get(root.uuid)
            if before is not None and described.isdisjoint(before.summed):
                # the same answers, no consumer of it described since it was made
                found = before.tree
            else:
                tree = members[root.uuid]
                found = ProviderTree(
                    root_uuid=root.uuid,
                    root_name=root.name,
                    root=inventories[root.uuid],
                    nested={provider.name: inventories[provider.uuid] for provider in tree[1:]},
                    consumers={
                        uuid: self._with_description(uuid, resources)
                        for uuid, resources in sorted(summed[root.uuid].items())
                    },
                )
            trees[hypervisor] = found
            kept[root.uuid] = _Tree(made_of[root.uuid], summed[root.uuid], found)
        self._trees = kept
        read = {provider.uuid for tree in members.values() for provider in tree}
        self._made = {job: made for job, made in self._made.items() if job[0] in read}
        return PlacementRead(
            trees=trees,
            requests=dict(counter.requests),
            seconds=dict(counter.seconds),
            providers=len(to_read),
            undescribed=undescribed,
        )

    def _read_provider(
        self, counter: _Counter, uuid: str, kind: str
    ) -> tuple[str, str, dict[str, ProviderInventory] | dict[str, dict[str, int]] | None]:
        """A provider's inventories or allocations; None: the provider is gone (404). An answer
        the same as last round's (by its digest: BLAKE2b's 128 bits) is not parsed again, and
        what was made of it is the same object."""
        path = f"/resource_providers/{uuid}/{kind}"
        answer = self._fetch(counter, kind, path)
        if answer.status == HTTPStatus.NOT_FOUND:
            return uuid, kind, None
        digest = hashlib.blake2b(answer.body, digest_size=16).digest()
        before = self._made.get((uuid, kind))
        if before is not None and before[0] == digest and answer.status == HTTPStatus.OK:
            return uuid, kind, before[1]
        body = self._answer(path, answer)
        made = _inventories(body, path) if kind == "inventories" else _allocations(body, path)
        self._made[uuid, kind] = (digest, made)
        return uuid, kind, made

    def _fan_out(
        self,
        jobs: Sequence[tuple[str, str]],
        work: Callable[[tuple[str, str]], tuple[str, str, Any]],
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Inventories and allocations by provider UUID, read `concurrency` at a time; the first
        failure cancels the requests not yet sent and is raised once those in flight are over."""
        found: dict[str, dict[str, Any]] = {"inventories": {}, "allocations": {}}
        for uuid, kind, value in _concurrently(jobs, work, self._concurrency):
            found[kind][uuid] = value
        return found["inventories"], found["allocations"]

    def _describe(
        self,
        counter: _Counter,
        matched: Mapping[str, _Provider | None],
        summed: Mapping[str, Mapping[str, Mapping[str, int]]],
        describe: DescribeWanted,
    ) -> tuple[set[str], int]:
        """Describes the consumers asked about not described yet (at most `max_described`);
        forgets those no tree holds any more. Those described now, and how many are left for a
        later round."""
        held = {uuid for consumers in summed.values() for uuid in consumers}
        self._described = {uuid: known for uuid, known in self._described.items() if uuid in held}
        wanted: set[str] = set()
        for hypervisor, root in sorted(matched.items()):
            if root is None:
                continue
            for uuid in summed[root.uuid]:
                if uuid in self._described or uuid in wanted:
                    continue
                if isinstance(describe, AbstractSet):
                    asked = uuid in describe or uuid.lower() in describe
                else:
                    asked = describe(hypervisor, uuid)
                if asked:
                    wanted.add(uuid)
        chosen = sorted(wanted)[: self._max_described]
        described = set()
        for uuid, description in _concurrently(
            chosen, lambda uuid: (uuid, self._consumer(counter, uuid)), self._concurrency
        ):
            if description is not None:
                self._described[uuid] = description
                described.add(uuid)
        return described, len(wanted) - len(chosen)

    def _consumer(self, counter: _Counter, uuid: str) -> _Description | None:
        path = f"/allocations/{uuid}"
        body = self._get(counter, "consumer", path)
        if not isinstance(body.get("allocations"), dict):
            raise _shape(path, "allocations", "an object")
        consumer_type, project = body.get("consumer_type"), body.get("project_id")
        if not isinstance(consumer_type, str | None) or not isinstance(project, str | None):
            raise _shape(path, "consumer_type/project_id", "strings")
        if not body["allocations"]:
            return None  # gone since its provider's allocations were read
        return _Description(consumer_type, project)

    def _with_description(self, uuid: str, resources: Mapping[str, int]) -> Consumer:
        known = self._described.get(uuid)
        if known is None:
            return Consumer(uuid, dict(resources))
        return Consumer(uuid, dict(resources), known.consumer_type, known.project_id)

    @typing.overload
    def _get(self, counter: _Counter, kind: str, path: str) -> dict[str, Any]: ...

    @typing.overload
    def _get(self, counter: _Counter, kind: str, path: str, *, missing_ok: bool) -> dict[str, Any] | None: ...

    def _get(
        self, counter: _Counter, kind: str, path: str, *, missing_ok: bool = False
    ) -> dict[str, Any] | None:
        """One GET, its JSON object (None for a 404 where `missing_ok`); PlacementError for
        anything else."""
        answer = self._fetch(counter, kind, path)
        if missing_ok and answer.status == HTTPStatus.NOT_FOUND:
            return None
        return self._answer(path, answer)

    def _fetch(self, counter: _Counter, kind: str, path: str) -> Answer:
        started = time.monotonic()
        try:
            return self._http.get(path)
        except PlacementError as error:
            raise PlacementError(self._scrubbed(str(error))) from None
        finally:
            counter.add(kind, time.monotonic() - started)

    def _answer(self, path: str, answer: Answer) -> dict[str, Any]:
        status = answer.status
        if status == HTTPStatus.UNAUTHORIZED:
            raise PlacementError(
                f"Placement refused the credentials (401) for GET {path}: check placement.auth"
                " (with `auth.type: none`, is Placement's auth_strategy noauth2?)"
            )
        if status == HTTPStatus.FORBIDDEN:
            raise PlacementError(
                f"Placement forbade GET {path} (403): its default policy lets only the admin or"
                " service role read providers and allocations; give virtcap's user one of them"
            )
        if status != HTTPStatus.OK:
            raise PlacementError(
                self._scrubbed(f"Placement answered {status} to GET {path}{_error_title(answer)}")
            )
        try:
            body = json.loads(answer.body)
        except ValueError:  # not JSON, or not text
            kind = answer.content_type or "no content type"
            raise PlacementError(f"Placement answered GET {path} with {kind}, not JSON") from None
        if not isinstance(body, dict):
            raise _shape(path, "the answer", "a JSON object")
        return body

    def _scrubbed(self, message: str) -> str:
        for secret in self._secrets:
            message = message.replace(secret, "***")
        return message


@dataclass(frozen=True, slots=True)
class _MadeOf:
    """What a provider tree is made of: its providers' names, and what was made of their
    inventories' and allocations' answers."""

    names: tuple[str, ...]
    answers: tuple[object, ...]

    def same(self, other: _MadeOf) -> bool:
        """The same names, and each answer's the very object (`_made` keeps them while their
        answers stay the same)."""
        return (
            self.names == other.names
            and len(self.answers) == len(other.answers)
            and all(mine is theirs for mine, theirs in zip(self.answers, other.answers, strict=True))
        )


@dataclass(frozen=True, slots=True)
class _Tree:
    """A provider tree as a round made it, and what it was made of."""

    made_of: _MadeOf
    summed: Mapping[str, Mapping[str, int]]
    """Per consumer, its amounts per class over the tree's providers."""
    tree: ProviderTree


class _Counter:
    """Requests and their durations per kind, from the round's threads."""

    def __init__(self) -> None:
        self.requests = dict.fromkeys(REQUEST_KINDS, 0)
        self.seconds = dict.fromkeys(REQUEST_KINDS, 0.0)
        self._lock = threading.Lock()

    def add(self, kind: str, seconds: float) -> None:
        with self._lock:
            self.requests[kind] += 1
            self.seconds[kind] += seconds


def _concurrently(jobs: Sequence[_T], work: Callable[[_T], Any], workers: int) -> list[Any]:
    """`work` over `jobs`, `workers` at a time; the first exception raised once the jobs in
    flight are over (those not started are cancelled)."""
    if not jobs:
        return []
    pool = ThreadPoolExecutor(max_workers=min(workers, len(jobs)), thread_name_prefix="placement")
    try:
        futures: list[Future[Any]] = [pool.submit(work, job) for job in jobs]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((future for future in futures if future in done and future.exception()), None)
        if failed is not None:
            pool.shutdown(wait=True, cancel_futures=True)
            raise failed.exception()  # type: ignore[misc]
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _match(
    wanted: str, by_uuid: Mapping[str, _Provider], by_name: Mapping[str, _Provider]
) -> _Provider | None:
    """A provider by UUID (any spelling), else by name."""
    try:
        found = by_uuid.get(str(uuid_module.UUID(wanted)))
    except ValueError:
        found = None
    return found if found is not None else by_name.get(wanted)


def _subtree(root: _Provider, children: Mapping[str, Sequence[_Provider]]) -> list[_Provider]:
    """The root first, then its descendants (breadth first)."""
    tree, index, seen = [root], 0, {root.uuid}
    while index < len(tree):
        for child in sorted(children.get(tree[index].uuid, ()), key=lambda provider: provider.name):
            if child.uuid not in seen:  # a cycle is Placement's bug, not a reason to loop
                seen.add(child.uuid)
                tree.append(child)
        index += 1
    return tree


def _consumers(allocations: Iterable[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """Per consumer, its amounts per class summed over the providers."""
    summed: dict[str, dict[str, int]] = {}
    for per_consumer in allocations:
        for uuid, resources in per_consumer.items():
            held = summed.setdefault(uuid, {})
            for name, amount in resources.items():
                held[name] = held.get(name, 0) + amount
    return summed


def _providers(body: Mapping[str, Any]) -> list[_Provider]:
    path = "/resource_providers"
    listed = body.get("resource_providers")
    if not isinstance(listed, list):
        raise _shape(path, "resource_providers", "a list")
    providers = []
    for index, entry in enumerate(listed):
        where = f"resource_providers[{index}]"
        if not isinstance(entry, dict):
            raise _shape(path, where, "an object")
        uuid, name, parent = entry.get("uuid"), entry.get("name"), entry.get("parent_provider_uuid")
        if not isinstance(uuid, str) or not isinstance(name, str):
            raise _shape(path, f"{where}.uuid/name", "strings")
        if not isinstance(parent, str | None):
            raise _shape(path, f"{where}.parent_provider_uuid", "a string or null")
        providers.append(_Provider(uuid, name, parent))
    return providers


_INVENTORY_DEFAULTS = {"reserved": 0, "min_unit": 1, "step_size": 1, "allocation_ratio": 1.0}


def _inventories(body: Mapping[str, Any], path: str) -> dict[str, ProviderInventory]:
    listed = body.get("inventories")
    if not isinstance(listed, dict):
        raise _shape(path, "inventories", "an object")
    found = {}
    for name, fields in listed.items():
        if not isinstance(fields, dict):
            raise _shape(path, f"inventories.{name}", "an object")
        values = {**_INVENTORY_DEFAULTS, "max_unit": fields.get("total"), **fields}
        for key in ("total", "reserved", "min_unit", "max_unit", "step_size"):
            if not _is_integer(values[key]):
                raise _shape(path, f"inventories.{name}.{key}", "an integer")
        ratio = values["allocation_ratio"]
        if not isinstance(ratio, int | float) or isinstance(ratio, bool):
            raise _shape(path, f"inventories.{name}.allocation_ratio", "a number")
        found[name] = ProviderInventory(
            total=values["total"],
            reserved=values["reserved"],
            min_unit=values["min_unit"],
            max_unit=values["max_unit"],
            step_size=values["step_size"],
            allocation_ratio=float(ratio),
        )
    return found


def _allocations(body: Mapping[str, Any], path: str) -> dict[str, dict[str, int]]:
    listed = body.get("allocations")
    if not isinstance(listed, dict):
        raise _shape(path, "allocations", "an object")
    found = {}
    for consumer, held in listed.items():
        resources = held.get("resources") if isinstance(held, dict) else None
        if not isinstance(resources, dict):
            raise _shape(path, f"allocations.{consumer}.resources", "an object")
        for name, amount in resources.items():
            if not _is_integer(amount):
                raise _shape(path, f"allocations.{consumer}.resources.{name}", "an integer")
        found[consumer] = dict(resources)
    return found


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shape(path: str, where: str, expected: str) -> PlacementError:
    return PlacementError(
        f"Placement answered GET {path} with JSON of another shape: {where}: expected {expected}"
    )


def _error_title(answer: Answer) -> str:
    """Placement's own title of an error (`{"errors": [{"title": ...}]}`), if it gave one."""
    try:
        errors = json.loads(answer.body).get("errors")
        title = errors[0]["title"]
    except (ValueError, AttributeError, LookupError, TypeError):
        return ""
    return f" ({first_line(title)})" if isinstance(title, str) else ""
