"""What the hostile drills measure a sidecar with: its resident memory sampled in a thread
(peak per phase), a background sender of small OTLP requests whose latencies show ingest
stalls, raw HTTP/1.1 uploads that never finish, and timed requests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx

from faultfinder.drills.chaos.traffic import ChaosTraffic
from faultfinder.drills.ingest import process_memory_kb
from faultfinder.evaluation.replay.otlp_http import PROTOBUF_CONTENT_TYPE

__all__ = [
    "IngestProbe",
    "MemoryWatch",
    "Phase",
    "RawUpload",
    "Timed",
    "timed",
]

PROTOBUF_HEADERS = {"content-type": PROTOBUF_CONTENT_TYPE}


def _rss_mb(pid: int) -> float | None:
    rss = process_memory_kb(pid).get("VmRSS")
    return None if rss is None else round(rss / 1024, 1)


@dataclass
class Phase:
    """Resident memory of the sidecar over one phase of a drill, in MB."""

    start_mb: float | None = None
    peak_mb: float | None = None
    end_mb: float | None = None


class MemoryWatch:
    """Samples the VmRSS of process `pid` every `interval` seconds in a thread; `phase()`
    gives the peak of the samples taken while it is open, never below the process's own
    high-water mark over the phase where the kernel lets it be reset (`clear_refs`)."""

    def __init__(self, pid: int, *, interval: float = 0.05) -> None:
        self.pid = pid
        self._interval = interval
        self._peak: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def rss_mb(self) -> float | None:
        return _rss_mb(self.pid)

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            rss = _rss_mb(self.pid)
            if rss is None:
                return
            with self._lock:
                self._peak = rss if self._peak is None else max(self._peak, rss)

    def _reset_high_water_mark(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as handle:
                handle.write("5")
        except OSError:
            return False
        return True

    @contextlib.contextmanager
    def phase(self) -> Iterator[Phase]:
        phase = Phase(start_mb=self.rss_mb())
        with self._lock:
            self._peak = phase.start_mb
        exact = self._reset_high_water_mark()
        try:
            yield phase
        finally:
            with self._lock:
                peak = self._peak
            hwm = process_memory_kb(self.pid).get("VmHWM") if exact else None
            if hwm is not None:
                peak = max(peak or 0.0, round(hwm / 1024, 1))
            phase.peak_mb = peak
            phase.end_mb = self.rss_mb()


@dataclass
class _Sample:
    started: float
    seconds: float
    status: int


@dataclass
class IngestProbe:
    """Small OTLP requests (one 4-span run each) sent one after another from a thread,
    `interval` seconds apart; the latencies tell how long ingest stalled during any window."""

    url: str
    interval: float = 0.1
    samples: list[_Sample] = field(default_factory=list)
    _open_since: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> IngestProbe:
        self._thread = threading.Thread(target=self._send, name="ingest-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _send(self) -> None:
        traffic = ChaosTraffic(steps_per_run=3, failed_interval_s=None)
        with httpx.Client(timeout=120) as client:
            while not self._stop.is_set():
                body = traffic.next_request().body
                started = time.monotonic()
                self._open_since = started
                try:
                    status = client.post(
                        f"{self.url}/v1/traces", content=body, headers=PROTOBUF_HEADERS
                    ).status_code
                except httpx.HTTPError:
                    status = 0
                self._open_since = None
                self.samples.append(_Sample(started, time.monotonic() - started, status))
                self._stop.wait(self.interval)

    def worst_between(self, start: float, end: float) -> float:
        """The longest ingest latency of the requests open at any time in [start, end]
        (one still open counts until now): how long ingest stalled in that window."""
        worst = 0.0
        for sample in list(self.samples):
            if sample.started <= end and sample.started + sample.seconds >= start:
                worst = max(worst, sample.seconds)
        open_since = self._open_since
        if open_since is not None and open_since <= end:
            worst = max(worst, time.monotonic() - open_since)
        return round(worst, 3)

    def summary(self) -> dict[str, float | int]:
        """Requests sent, how many were not 200, and the median and worst latency."""
        latencies = sorted(sample.seconds for sample in self.samples)
        if not latencies:
            return {"requests": 0}
        return {
            "requests": len(latencies),
            "not_200": sum(sample.status != 200 for sample in self.samples),
            "p50_s": round(latencies[len(latencies) // 2], 3),
            "max_s": round(latencies[-1], 3),
        }


@dataclass
class Timed:
    """One request made by a drill: its status, seconds and body size."""

    status: int
    seconds: float
    size: int
    response: httpx.Response | None = None
    started: float = 0.0
    ended: float = 0.0

    def figures(self) -> dict[str, float | int]:
        return {"status": self.status, "seconds": round(self.seconds, 3), "bytes": self.size}


def timed(call: Callable[[], httpx.Response]) -> Timed:
    """Make the request `call` makes and time it (status 0 for no answer)."""
    started = time.monotonic()
    try:
        response = call()
    except httpx.HTTPError:
        ended = time.monotonic()
        return Timed(0, ended - started, 0, None, started, ended)
    ended = time.monotonic()
    return Timed(
        response.status_code, ended - started, len(response.content), response, started, ended
    )


class RawUpload:
    """An HTTP/1.1 POST to /v1/traces on a raw socket, its body sent by hand: the head,
    then whatever bytes the drill chooses, possibly never the end."""

    def __init__(self, url: str, head: str, *, timeout: float = 60.0) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.sendall(
            f"POST /v1/traces HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: {PROTOBUF_CONTENT_TYPE}\r\n{head}\r\n".encode()
        )
        self._answer = b""

    def send(self, data: bytes) -> bool:
        """Send `data`; False once the server has closed or reset the connection."""
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def answered(self) -> bool:
        """Whether the server has answered (or closed) without waiting for it."""
        self.sock.setblocking(False)
        try:
            part = self.sock.recv(4096)
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            self.sock.setblocking(True)
        self._answer += part
        return True

    def status(self, timeout: float) -> int | None:
        """The answer's status code, waiting up to `timeout` seconds; None when the server
        closed without answering or took longer."""
        self.sock.settimeout(timeout)
        try:
            while b"\r\n" not in self._answer:
                part = self.sock.recv(4096)
                if not part:
                    return None
                self._answer += part
        except OSError:
            if b"\r\n" not in self._answer:
                return None
        return int(self._answer.split(b" ", 2)[1])

    def close(self) -> None:
        self.sock.close()
