"""docker/nginx.conf, the reverse proxy of the container deployment, run with Debian's nginx in front of the real
server (uvicorn, stand-in stages): slow clients are cut off, bodies are capped before the app, errors are JSON.

Skipped where nginx is not installed (`.ci/run` installs it). Only the upstream address and the listen port of
the configuration file are changed for the test.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import REAL_CLIP, REPO, free_port

NGINX = shutil.which("nginx") or next(
    (p for p in ("/usr/sbin/nginx", "/sbin/nginx") if Path(p).is_file()), None
)
CONF = REPO / "docker" / "nginx.conf"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx)"),
]


def _conf_value(name: str) -> str:
    line = next(x for x in CONF.read_text().splitlines() if x.strip().startswith(name + " "))
    return line.split()[1].rstrip(";")


HEADER_TIMEOUT_S = int(_conf_value("client_header_timeout").removesuffix("s"))  # as docker/nginx.conf sets it


@pytest.fixture
def proxy(start_server, tmp_path) -> Iterator[str]:
    server = start_server()
    upstream = server.url.removeprefix("http://")
    port = free_port()
    text = CONF.read_text()
    assert "server semworld:8000;" in text and "listen 8080;" in text
    text = text.replace("server semworld:8000;", f"server {upstream};").replace(
        "listen 8080;", f"listen 127.0.0.1:{port};"
    )
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    (prefix / "semworld.conf").write_text(text)
    log = (prefix / "nginx.log").open("w")
    proc = subprocess.Popen(
        [NGINX, "-p", f"{prefix}/", "-c", str(prefix / "semworld.conf"), "-g", "daemon off;"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, (prefix / "nginx.log").read_text()
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "nginx did not come up"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_proxy_serves_the_api_caps_bodies_and_cuts_off_slow_clients(proxy):
    with httpx.Client(base_url=proxy, timeout=30) as c:
        r = c.post(
            "/v1/predict",
            files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")},
            data={"horizon": "2", "stride": "8"},
        )
        assert r.status_code == 200 and len(r.json()["frames"]) == 2
        assert c.get("/v1/jobs/nope").json() == {"detail": "no job 'nope'"}  # app errors pass through

    # Past the request rate per address (20/s, burst 40), the proxy answers 429 as JSON with Retry-After.
    with httpx.Client(base_url=proxy, timeout=30) as c:
        answers = [c.get("/health") for _ in range(80)]
    limited = [r for r in answers if r.status_code == 429]
    assert limited and all(r.status_code in (200, 429) for r in answers)
    assert limited[0].headers["retry-after"] == "5" and "too many" in limited[0].json()["detail"]
    time.sleep(2.5)  # let the burst allowance refill

    # A body over the route's cap is refused by the proxy from its Content-Length, as JSON.
    host, port = proxy.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
            b"Content-Length: 20000000\r\n\r\n"
        )
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413") and b'"detail"' in answer

    # The slow-client probe: one header line every 2 s. The proxy closes the connection once the header has
    # taken longer than client_header_timeout.
    with socket.create_connection((host, int(port)), timeout=HEADER_TIMEOUT_S + 10) as s:
        t0 = time.monotonic()
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        closed_after = None
        for i in range(30):
            time.sleep(2)
            try:
                s.sendall(f"X-Slow-{i}: {i}\r\n".encode())
                s.settimeout(0.01)
                if s.recv(4096) == b"":
                    closed_after = time.monotonic() - t0
                    break
            except TimeoutError:
                continue
            except OSError:  # reset: closed
                closed_after = time.monotonic() - t0
                break
    assert closed_after is not None, "the slow client was never cut off"
    assert closed_after <= HEADER_TIMEOUT_S + 3, closed_after
