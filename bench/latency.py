"""virtcap over a real network delay, next to prometheus-libvirt-exporter (`run.py --only latency`).

    python bench/run.py --only latency [--quick]

A real libvirtd (QEMU driver, session mode, as in tests/support/libvirtd.py) is reached over
`qemu+tcp://127.0.0.1:PORT/session` through a delay: the benchmark creates a network namespace of
its own, brings its loopback up with `tc qdisc add dev lo root netem delay D ms`, and runs every
process of the measurement inside (`ip netns exec`): the daemon, `virtcap serve`,
prometheus-libvirt-exporter, and this module again as the driver that scrapes them. No packet
leaves 127.0.0.1; netem delays each packet once on its way through the loopback, so a round trip
costs 2 D (and the HTTP scrapes pay it too). The namespace is deleted afterwards, whatever
happened (an error, Ctrl-C, SIGTERM), and any process still in it killed first.

Where the kernel has no netem (CONFIG_NET_SCH_NETEM unset, as in some VMs: `tc` answers
"Specified qdisc kind is unknown"), the libvirt link alone is delayed by a relay process inside
the same namespace (`--relay`, below): what it reads from either side it writes to the other D
later, in order; a new connection waits one round trip first, as TCP's handshake would. TCP's
acknowledgements are not delayed, nor are the HTTP scrapes. The tables say which of the two ran.

The daemon holds many tiny `type='qemu'` domains (RUNNING_GUESTS of them running TCG guests
without a disk, idling in their firmware; the rest shut off); virtcap is configured with many
hypervisors whose URIs all reach that one daemon: each is a connection of its own, as distinct
hypervisors would be. Per delay and number of domains:

- audit cycle time per hypervisor: virtcap's own `hypervisor_audit_duration_seconds` (the last
  successful audit of each hypervisor, its median and range over the hypervisors) once the
  audits are in their steady state;
- libvirt round trips per hypervisor per audit, full (`audit.incremental: false`) against
  incremental (after the first, full, audit of the connection; `resync_every` out of the way);
- whether both modes serve the same numbers (every sample of the hypervisor_* families in
  COMPARED, all hypervisors);
- prometheus-libvirt-exporter's /metrics scrape time on the same link (it connects and reads the
  running domains on every scrape) and its round trips, and virtcap's own /metrics (from memory).

Round trips are counted with libvirt's own client-side instrumentation, not inferred: the exporter
runs with LIBVIRT_LOG_FILTERS="2:rpc.netclient" and LIBVIRT_LOG_OUTPUTS pointing to a file, where
libvirt's remote driver logs every message it queues for sending (`RPC_CLIENT_MSG_TX_QUEUE:
client=0x... prog=... proc=... type=...`). A call of the remote program (prog 0x20008086, type 0 =
call) is one request waiting for its reply: one round trip. Keepalive messages (their own program)
and events (sent by the daemon) are not calls and are left out. prometheus-libvirt-exporter
(libvirt-go over the same C library) is counted the same way. Each client pointer is one
connection, that is one hypervisor; its calls fall into bursts, one per audit, separated by the
idle audit interval (a gap of more than GAP_SECONDS): the first burst (opening the connection,
reading the host's layout, the first full audit) is reported apart from the steady-state ones.
Packet counts (`tc -s qdisc`) were not used: TCP segments, acknowledgements and keepalives blur
the number of calls, and they cannot be told apart per connection.

Every figure is one run's (the median over the hypervisors and their audits, with the range),
on whatever machine runs it: on a 2-CPU machine the daemon, the exporter and the guests share the
CPUs, which lengthens what is not the delay.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import itertools
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import libvirt

import harness
from virtcap.config.schema import AuditSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.libvirtd import SEARCH_PATH, Libvirtd, answers, daemon_owner, prepare

REMOTE_PROGRAM = 0x20008086
"""libvirt's remote protocol (REMOTE_PROGRAM); keepalives have a program of their own."""
CALL = 0
GAP_SECONDS = 1.5
"""Between two calls of one audit there is a round trip and the work of either end; between two
audits the interval (AUDIT_INTERVAL): a longer silence starts the next audit."""
AUDIT_INTERVAL = "4s"
STEADY_AUDITS = 3
"""Audits of every hypervisor after its first, counted before its figures are read."""
NAMESPACE_PREFIX = "virtcap-bench-"
COMPARED = (
    "hypervisor_resource_size",
    "hypervisor_resource_limit",
    "hypervisor_resource_allocated",
    "hypervisor_resource_used",
    "hypervisor_resource_free",
    "hypervisor_domains",
    "hypervisor_schedulable_instances",
    "hypervisor_audit_problems",
)
"""Families both modes must serve identically (what varies between two audits, CPU busy time,
memory in use and the audits' own timing, is left out)."""
RUNNING_GUESTS = 8
TX = re.compile(
    r"^(\S+ \S+): \d+: info : \S+ : RPC_CLIENT_MSG_TX_QUEUE: client=(0x[0-9a-f]+) .*?"
    r"prog=(\d+) .*?type=(\d+) "
)


@dataclass(frozen=True)
class Sizes:
    domains: tuple[int, ...]
    delays_ms: tuple[float, ...]
    hypervisors: int
    peer_scrapes: int


QUICK = Sizes(domains=(50, 200), delays_ms=(1, 10), hypervisors=10, peer_scrapes=2)
FULL = Sizes(domains=(100, 400), delays_ms=(1, 5, 20), hypervisors=20, peer_scrapes=3)


# The namespace, from outside: created, the measurement run inside it, deleted.


def network_latency(quick: bool) -> None:
    """Runs the measurement in a namespace of its own and prints its tables."""
    name = f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        inside = ["ip", "netns", "exec", name]
        subprocess.run([*inside, "ip", "link", "set", "lo", "up"], check=True)
        netem = subprocess.run(
            [*inside, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "0ms"],
            capture_output=True,
            text=True,
            check=False,
        )
        if netem.returncode != 0:
            print(
                f"\n(netem is not available here: `{netem.stderr.strip()}`; the delay is a relay process "
                "in the namespace instead, see bench/latency.py)"
            )
            sys.stdout.flush()
        command = [*inside, sys.executable, str(Path(__file__).resolve()), "--inside"]
        command += ["--netem"] if netem.returncode == 0 else []
        subprocess.run([*command, *(["--quick"] if quick else [])], check=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
        _delete_namespace(name)


def _interrupted(_signal: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _delete_namespace(name: str) -> None:
    """Whatever is left in it (a child that outlived an interrupted driver) is ours: killed, so
    that the namespace really goes with its name."""
    left = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False)
    for pid in left.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    subprocess.run(["ip", "netns", "delete", name], check=False)


# Inside the namespace: the daemon, its domains, the exporters, the figures.


def set_delay(milliseconds: float) -> None:
    subprocess.run(
        ["tc", "qdisc", "change", "dev", "lo", "root", "netem", "delay", f"{milliseconds}ms"], check=True
    )


@contextlib.contextmanager
def delayed_link(port: int, milliseconds: float, netem: bool) -> Iterator[int]:
    """The port through which the daemon's `port` is reached `milliseconds` away (each way)."""
    if netem:
        set_delay(milliseconds)
        try:
            yield port
        finally:
            set_delay(0)
        return
    relay_port = harness.free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--relay", str(relay_port), str(port)]
    with harness.process([*command, str(milliseconds)]):
        harness.wait(lambda: _listening(relay_port), 30)
        yield relay_port


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


# The relay where the kernel has no netem: a propagation delay each way, not a bandwidth limit.


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not chunk:
                writer.close()
                return
            writer.write(chunk)
            await writer.drain()

    delivering = asyncio.create_task(deliver())
    try:
        while True:
            chunk = await reader.read(65536)
            queue.put_nowait((loop.time() + delay, chunk))
            if not chunk:
                break
        await delivering
    except (ConnectionError, OSError):
        delivering.cancel()
        writer.close()


async def _relay(listen: int, target: int, delay: float) -> None:
    async def connected(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(2 * delay)
        try:
            daemon_reader, daemon_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            _pump(client_reader, daemon_writer, delay), _pump(daemon_reader, client_writer, delay)
        )

    server = await asyncio.start_server(connected, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


def relay(listen: int, target: int, milliseconds: float) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(_relay(listen, target, milliseconds / 1000))


@contextlib.contextmanager
def tcp_daemon(directory: Path) -> Iterator[tuple[Libvirtd, int]]:
    """A private session libvirtd (tests/support/libvirtd.py's folders and user) that also listens on TCP
    127.0.0.1 without authentication, and its port; stopped with its guests afterwards."""
    owner = daemon_owner()
    environment = prepare(directory, owner)
    port = harness.free_port()
    config = directory / "config" / "libvirt" / "libvirtd.conf"
    config.write_text(
        config.read_text()
        + 'listen_tcp = 1\nlisten_tls = 0\nauth_tcp = "none"\nlisten_addr = "127.0.0.1"\n'
        + f'tcp_port = "{port}"\n'
    )
    daemon = Libvirtd(directory, directory / "libvirtd.log", owner, environment=environment)
    command = ["setpriv", "--pdeathsig=KILL"]
    if os.geteuid() == 0:
        command += [f"--reuid={owner[0]}", f"--regid={owner[1]}", "--clear-groups"]
    binary = shutil.which("libvirtd", path=SEARCH_PATH)
    if binary is None:
        raise SystemExit("libvirtd is not installed: `apt-get install libvirt-daemon-system`")
    command += ["--", binary, "--listen", "--config", str(config)]
    try:
        with daemon.log.open("ab") as output:
            daemon.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=environment
            )
        harness.wait(
            lambda: answers(daemon.uri) or daemon.process is None or daemon.process.poll() is not None, 60
        )
        if daemon.process.poll() is not None:
            raise SystemExit(f"libvirtd did not start: {daemon.log_tail()}")
        daemon.warm_up()
        yield daemon, port
    finally:
        with contextlib.suppress(Exception):
            daemon.destroy_guests()
        daemon.stop()


DOMAIN = """<domain type='qemu'><name>{name}</name><uuid>{uuid}</uuid>
<memory unit='MiB'>{memory}</memory><vcpu>{vcpus}</vcpu>
<os><type arch='x86_64' machine='pc'>hvm</type></os>
<devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>"""


def populate(daemon: Libvirtd, domains: int) -> None:
    """Tiny domains until the daemon has `domains` of them, over its local socket (no delay); the
    first RUNNING_GUESTS started (TCG guests without a disk: they idle in the firmware)."""
    conn: Any = libvirt.open(daemon.uri)
    try:
        present = conn.numOfDefinedDomains() + conn.numOfDomains()
        for index in range(present, domains):
            name = f"bench-{index:04d}"
            xml = DOMAIN.format(
                name=name, uuid=uuid.uuid4(), memory=64 * (1 + index % 4), vcpus=1 + index % 3
            )
            domain = conn.defineXML(xml)
            if index < RUNNING_GUESTS:
                domain.create()
    finally:
        conn.close()


@contextlib.contextmanager
def environment(**variables: str) -> Iterator[None]:
    """os.environ with `variables` while starting a child (which copies it then)."""
    saved = {key: os.environ.get(key) for key in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def scrape(port: int) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("GET", "/metrics")
        return connection.getresponse().read().decode()
    finally:
        connection.close()


def samples(text: str, families: tuple[str, ...]) -> dict[str, float]:
    found = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in families:
            series, _, value = line.rpartition(" ")
            found[series] = float(value)
    return found


def successful_audits(text: str) -> dict[str, float]:
    return {
        series: value
        for series, value in samples(text, ("virtcap_audits_total",)).items()
        if 'outcome="success"' in series
    }


@dataclass
class Audited:
    """One `virtcap serve` over the delayed link, once every hypervisor has audited steadily."""

    durations: list[float]
    """hypervisor_audit_duration_seconds of each hypervisor: its last (steady-state) audit."""
    first: list[int]
    """Round trips of each connection's first burst: opening, the host's layout, the first audit."""
    steady: list[int]
    """Round trips of every later audit of every connection."""
    connections: int
    compared: dict[str, float]
    scrape_seconds: float


def audited(scratch: Path, uri: str, hypervisors: int, incremental: bool, label: str) -> Audited:
    names = {f"hv-{index:03d}": uri for index in range(hypervisors)}
    # without incremental audits in this virtcap, the keys are left out (unknown keys are refused)
    modes = {"incremental": incremental, "resync_every": 1000} if incremental_supported() else {}
    config = harness.write_config(
        scratch, names, interval=AUDIT_INTERVAL, timeout="600s", concurrency=hypervisors, **modes
    )
    log = scratch / f"rpc-{label}.log"
    with (
        environment(LIBVIRT_LOG_FILTERS="2:rpc.netclient", LIBVIRT_LOG_OUTPUTS=f"2:file:{log}"),
        harness.virtcap(config) as (port, _child, _ready),
    ):
        first = successful_audits(scrape(port))
        harness.wait(lambda: _audited_again(port, first, STEADY_AUDITS), 1800)
        text = scrape(port)
        scrape_seconds = statistics.median(harness.latencies(port, 5))
    first_bursts, steady = round_trips(log)
    durations = list(samples(text, ("hypervisor_audit_duration_seconds",)).values())
    return Audited(
        durations=durations,
        first=first_bursts,
        steady=steady,
        connections=len(first_bursts),
        compared=samples(text, COMPARED),
        scrape_seconds=scrape_seconds,
    )


def _audited_again(port: int, first: dict[str, float], count: int) -> bool:
    now = successful_audits(scrape(port))
    return bool(now) and all(now[series] >= first.get(series, 0) + count for series in now)


def remote_calls(log: Path) -> dict[str, list[float]]:
    """When each connection (client pointer) queued each call of the remote program."""
    calls: dict[str, list[float]] = defaultdict(list)
    for line in log.read_text(errors="replace").splitlines():
        match = TX.match(line)
        if match is None or int(match.group(3)) != REMOTE_PROGRAM or int(match.group(4)) != CALL:
            continue
        calls[match.group(2)].append(datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S.%f%z").timestamp())
    return calls


def round_trips(log: Path) -> tuple[list[int], list[int]]:
    """Calls of the remote program per connection, split into audits by the silences between
    them: the first burst of each connection, and every later one."""
    first, steady = [], []
    for times in remote_calls(log).values():
        bursts = [1]
        for before, after in itertools.pairwise(times):
            if after - before > GAP_SECONDS:
                bursts.append(0)
            bursts[-1] += 1
        first.append(bursts[0])
        # the last burst may be an audit cut short by the exporter's stop
        steady.extend(bursts[1:-1] if len(bursts) > 2 else bursts[1:])
    return first, steady


@dataclass
class Scraped:
    """prometheus-libvirt-exporter over the delayed link: its scrape times and libvirt calls."""

    seconds: list[float]
    round_trips: float
    """Its calls over the scrapes (one connection each, whose client pointers libvirt may reuse:
    counted together, not per pointer)."""


def peer_scraped(scratch: Path, uri: str, count: int, label: str) -> Scraped:
    """Its libvirt calls counted as virtcap's are (libvirt-go drives the same C client library)."""
    log = scratch / f"rpc-peer-{label}.log"
    with (
        environment(LIBVIRT_LOG_FILTERS="2:rpc.netclient", LIBVIRT_LOG_OUTPUTS=f"2:file:{log}"),
        harness.peer(uri) as port,
    ):
        seconds = harness.latencies(port, count)
    calls = remote_calls(log) if log.exists() else {}
    return Scraped(seconds, sum(len(times) for times in calls.values()) / len(seconds))


def spread(values: list[float], unit: str, digits: int = 2) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f}{unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def counts(values: list[int]) -> str:
    if not values:
        return "-"
    low, high = min(values), max(values)
    median = statistics.median(values)
    return f"{median:g}" if low == high else f"{median:g} ({low}-{high})"


def incremental_supported() -> bool:
    """Whether this virtcap knows `audit.incremental` (issue 17's incremental audits)."""
    return "incremental" in AuditSettings.model_fields


def measure(sizes: Sizes, netem: bool) -> None:
    modes = [False, True] if incremental_supported() else [False]
    audit_rows: harness.Table = []
    peer_rows: harness.Table = []
    with tempfile.TemporaryDirectory(prefix="virtcap-latency-") as directory:
        scratch = Path(directory)
        scratch.chmod(0o755)  # the daemon's user reaches its folder through it
        with tcp_daemon(scratch / "daemon") as (daemon, port):
            for domains in sizes.domains:
                populate(daemon, domains)
                for delay in sizes.delays_ms:
                    point = f"{domains}-{delay:g}"
                    with delayed_link(port, delay, netem) as link:
                        uri = f"qemu+tcp://127.0.0.1:{link}/session"
                        results = {
                            incremental: audited(
                                scratch, uri, sizes.hypervisors, incremental, f"{point}-{incremental}"
                            )
                            for incremental in modes
                        }
                        scraped = peer_scraped(scratch, uri, sizes.peer_scrapes, point)
                    audit_rows.extend(audit_row(domains, delay, sizes.hypervisors, results))
                    ours = results[modes[-1]].scrape_seconds
                    peer_rows.append(
                        (
                            str(domains),
                            f"{delay:g} ms",
                            spread(scraped.seconds, " s"),
                            f"{scraped.round_trips:g}",
                            f"{ours * 1000:.1f} ms",
                            f"{statistics.median(scraped.seconds) / ours:.0f}x",
                        )
                    )
    how = "netem on the namespace's loopback" if netem else "a relay in the namespace (no netem here)"
    harness.print_table(
        f"virtcap over qemu+tcp, delayed by {how}; a round trip costs twice the delay. {sizes.hypervisors} "
        f"hypervisors (connections) to one libvirtd ({RUNNING_GUESTS} domains running), audits every "
        f"{AUDIT_INTERVAL}, one run: audit duration per hypervisor (median, min-max over hypervisors) and "
        "libvirt round trips per hypervisor (counted in libvirt's client RPC log; median, min-max)",
        (
            "domains",
            "delay (one way)",
            "audits",
            "connections seen",
            "steady audit duration",
            "round trips: connect + first audit",
            "round trips per steady audit",
            "hypervisor_* series compared: same in both modes",
        ),
        audit_rows,
    )
    harness.print_table(
        f"{harness.PEER} /metrics on the same link ({sizes.peer_scrapes} scrapes: median, min-max; it opens "
        "a libvirt connection and reads the running domains on every scrape), next to virtcap's /metrics "
        f"(served from memory{'' if netem else '; the relay delays libvirt only, not HTTP'})",
        (
            "domains",
            "delay (one way)",
            f"{harness.PEER} scrape",
            "its round trips a scrape",
            "virtcap",
            "ratio",
        ),
        peer_rows,
    )


def audit_row(domains: int, delay: float, hypervisors: int, results: dict[bool, Audited]) -> harness.Table:
    same = "-"
    if len(results) == 2:
        same = "yes" if results[False].compared == results[True].compared else "NO"
    return [
        (
            str(domains),
            f"{delay:g} ms",
            "incremental" if incremental else "full",
            f"{found.connections}/{hypervisors}",
            spread(found.durations, " s"),
            counts(found.first),
            counts(found.steady),
            f"{len(found.compared)}: {same}",
        )
        for incremental, found in results.items()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--inside", action="store_true", help="(internal) measure in this namespace")
    parser.add_argument("--netem", action="store_true", help="(internal) the namespace has netem")
    parser.add_argument("--relay", nargs=3, type=float, help="(internal) LISTEN TARGET DELAY_MS")
    args = parser.parse_args()
    if args.relay:
        listen, target, milliseconds = args.relay
        relay(int(listen), int(target), milliseconds)
    elif args.inside:
        measure(QUICK if args.quick else FULL, args.netem)
    else:
        network_latency(args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
