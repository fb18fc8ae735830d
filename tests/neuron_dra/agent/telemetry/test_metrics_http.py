"""The metrics endpoint: scrapes off the event loop, and bounded requests from raw clients."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

from neuron_dra.agent.telemetry.metrics import Metrics, Sample

# Bounds on the test itself, so that a regression fails instead of hanging.
PATIENCE_S = 5.0
# The server's timeout in these tests: short, since every stalled client waits it out.
TIMEOUT_S = 0.2


async def exchange(port: int, request: bytes, address: str | None = None) -> bytes:
    """Send raw bytes (from `address`, any 127/8 address, where given), then read
    until the server closes the connection."""
    local = None if address is None else (address, 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=local)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), PATIENCE_S)
    finally:
        writer.close()


def serving(
    metrics: Metrics,
    test: Callable[[int], Awaitable[None]],
    timeout_s: float = TIMEOUT_S,
    max_connections: int = 16,
) -> None:
    async def main() -> None:
        server = await metrics.serve(
            0, "127.0.0.1", timeout_s=timeout_s, max_connections=max_connections
        )
        try:
            await test(server.sockets[0].getsockname()[1])
        finally:
            server.close()

    asyncio.run(main())


class BlockingGauge:
    """A file gauge that blocks until released, recording whether the release came in time."""

    def __init__(self) -> None:
        self.entered, self.release, self.finished = (threading.Event() for _ in range(3))
        self.released_in_time: list[bool] = []

    def __call__(self) -> list[Sample]:
        self.entered.set()
        self.released_in_time.append(self.release.wait(PATIENCE_S))
        self.finished.set()
        return [Sample("neuron_dra_device_power_draw_ratio", (("neuron_device", "0"),), 0.5)]


def test_a_blocked_file_gauge_leaves_the_event_loop_running() -> None:
    metrics = Metrics()
    metrics.file_gauges = gauge = BlockingGauge()

    async def test(port: int) -> None:
        scrape = asyncio.create_task(exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert await asyncio.to_thread(gauge.entered.wait, PATIENCE_S), (
            "the file gauge was not read"
        )

        async def other_work() -> str:
            await asyncio.sleep(0)
            return "done"

        # A prepare stands in here: it must finish while the gauge is still blocked.
        assert await asyncio.wait_for(other_work(), PATIENCE_S) == "done"
        assert not scrape.done()
        gauge.release.set()
        answer = await scrape
        assert answer.startswith(b"HTTP/1.1 200 OK")
        assert b'neuron_dra_device_power_draw_ratio{neuron_device="0"} 0.5' in answer

    serving(metrics, test)
    assert gauge.released_in_time == [True], "the gauge blocked the event loop until it gave up"


def test_a_hung_file_gauge_fails_scrapes_without_piling_up_readers() -> None:
    metrics = Metrics()
    metrics.file_gauges = gauge = BlockingGauge()

    async def test(port: int) -> None:
        try:
            for _ in range(3):
                answer = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
                assert answer.startswith(b"HTTP/1.1 503"), answer[:40]
            assert gauge.entered.is_set()
        finally:
            gauge.release.set()
            assert await asyncio.to_thread(gauge.finished.wait, PATIENCE_S)

    serving(metrics, test)
    # One reader for the three scrapes: the later ones waited on the hung one.
    assert gauge.released_in_time == [True]


def test_only_get_of_known_paths_is_answered() -> None:
    metrics = Metrics()
    metrics.inc("neuron_dra_slice_publishes_total")

    async def test(port: int) -> None:
        ok = await exchange(port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 OK")
        assert b"neuron_dra_slice_publishes_total 1.0" in ok
        assert b"Content-Type: text/plain; version=0.0.4" in ok
        healthz = await exchange(port, b"GET /healthz HTTP/1.1\r\n\r\n")
        assert healthz.startswith(b"HTTP/1.1 200 OK") and healthz.endswith(b"\r\n\r\nok\n")
        posted = await exchange(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi")
        assert posted.startswith(b"HTTP/1.1 405") and b"Allow: GET" in posted
        missing = await exchange(port, b"GET /other HTTP/1.1\r\n\r\n")
        assert missing.startswith(b"HTTP/1.1 404")

    serving(metrics, test)


def test_garbage_is_refused_and_the_server_keeps_serving() -> None:
    metrics = Metrics()

    async def test(port: int) -> None:
        for garbage in (b"\x00\xff\r\n\r\n", b"GET\r\n\r\n", b"GET /metrics SPDY/9\r\n\r\n"):
            answer = await exchange(port, garbage)
            assert answer.startswith(b"HTTP/1.1 400"), (garbage, answer[:40])
        ok = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 OK")

    serving(metrics, test)


def test_a_failing_gauge_answers_500_and_the_server_keeps_serving() -> None:
    metrics = Metrics()
    failures = iter([OSError("device gone")])

    def gauge() -> list[Sample]:
        for failure in failures:
            raise failure
        return []

    metrics.file_gauges = gauge

    async def test(port: int) -> None:
        failed = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert failed.startswith(b"HTTP/1.1 500"), failed[:40]
        ok = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 OK")

    serving(metrics, test)


def test_a_huge_request_head_is_refused() -> None:
    metrics = Metrics()

    async def test(port: int) -> None:
        # Unterminated, longer than the head may be: refused without waiting for the rest.
        huge = b"GET /metrics HTTP/1.1\r\nX-Filler: " + b"a" * 70_000
        answer = await exchange(port, huge)
        assert answer.startswith(b"HTTP/1.1 431"), answer[:40]

    serving(metrics, test)


def test_a_stalled_client_is_dropped_after_the_timeout() -> None:
    metrics = Metrics()

    async def test(port: int) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = await exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        assert answer == b""
        # Dropped by the server's timeout, well before the test's own patience ran out.
        assert loop.time() - started < PATIENCE_S / 2

    serving(metrics, test)


def test_connections_beyond_the_limit_are_turned_away() -> None:
    metrics = Metrics()
    metrics.file_gauges = gauge = BlockingGauge()

    async def test(port: int) -> None:
        held = asyncio.create_task(exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n"))
        try:
            # The first connection is inside a scrape, so it counts against the limit.
            assert await asyncio.to_thread(gauge.entered.wait, PATIENCE_S)
            answer = await exchange(port, b"GET /healthz HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 503"), answer[:40]
        finally:
            gauge.release.set()
            await held

    # The scrape must outlast the test's second request, so the timeout is the test's patience.
    serving(metrics, test, timeout_s=PATIENCE_S, max_connections=1)


def test_the_authorization_header_decides_a_scrape_and_not_the_health_path() -> None:
    """`authorize` gets the request's Authorization header, whatever its case, and the
    client's address; its
    verdict is the answer; /healthz asks nothing; a verdict slower than the
    timeout is 503; too many new tokens, 429 with a Retry-After."""
    asked: list[str | None] = []
    verdicts = {None: 401, "Bearer stranger": 403, "Bearer scraper": 200, "Bearer new": 429}

    async def authorize(header: str | None, address: str) -> int:
        asked.append(header)
        assert address == "127.0.0.1"
        if header == "Bearer slow":
            await asyncio.sleep(PATIENCE_S)
        return verdicts.get(header, 401)

    async def test(port: int) -> None:
        def get(path: bytes, header: bytes = b"") -> Awaitable[bytes]:
            return exchange(port, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n")

        anonymous = await get(b"/metrics")
        assert anonymous.startswith(b"HTTP/1.1 401") and b"WWW-Authenticate: Bearer" in anonymous
        assert (await get(b"/metrics", b"authorization: Bearer stranger\r\n")).startswith(
            b"HTTP/1.1 403"
        )
        allowed = await get(b"/metrics", b"AUTHORIZATION:  Bearer scraper \r\n")
        assert allowed.startswith(b"HTTP/1.1 200") and b"neuron_dra_prepare_duration" in allowed
        assert (await get(b"/healthz")).startswith(b"HTTP/1.1 200")
        assert (await get(b"/metrics", b"Authorization: Bearer slow\r\n")).startswith(
            b"HTTP/1.1 503"
        )
        flooded = await get(b"/metrics", b"Authorization: Bearer new\r\n")
        assert (
            flooded.startswith(b"HTTP/1.1 429 Too Many Requests") and b"Retry-After: 1" in flooded
        )
        assert asked == [None, "Bearer stranger", "Bearer scraper", "Bearer slow", "Bearer new"]

    async def main() -> None:
        server = await metrics.serve(0, "127.0.0.1", timeout_s=TIMEOUT_S, authorize=authorize)
        try:
            await test(server.sockets[0].getsockname()[1])
        finally:
            server.close()

    metrics = Metrics()
    asyncio.run(main())


async def idle(port: int, address: str) -> asyncio.StreamWriter:
    """A connection from `address` (any 127/8 address is this host's) that sends nothing."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(address, 0))
    return writer


def test_idle_connections_do_not_lock_a_scraper_out() -> None:
    """A client holding as many idle connections as the server allows, from another
    address or the scraper's own, does not turn the scraper away: the busiest address's
    oldest idle connection is dropped for the newcomer."""
    metrics = Metrics()

    async def test(port: int) -> None:
        for stranger in ("127.0.0.2", "127.0.0.1"):
            held = [await idle(port, stranger) for _ in range(16)]
            try:
                answer = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n", "127.0.0.1")
                assert answer.startswith(b"HTTP/1.1 200"), (stranger, answer[:40])
            finally:
                for writer in held:
                    writer.close()

    # The idle connections must outlast the scrape: the timeout is the test's patience.
    serving(metrics, test, timeout_s=PATIENCE_S)
