"""A throwaway PostgreSQL for tests: `initdb` in a temporary folder, the server on a unix socket only (no TCP),
trust authentication, one fresh database per test. Run as an unprivileged user when the tests run as root
(PostgreSQL refuses to run as root)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

SUPERUSER = "semworld"
PORT = 5432  # on a socket in a private folder: no clash with any other server


def find_bindir() -> Path | None:
    """The folder of initdb and pg_ctl: on PATH, else the newest /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def _unprivileged_user() -> str | None:
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    return None


class Cluster:
    """A PostgreSQL cluster in `root` (data, socket and log), stopped and started with pg_ctl."""

    def __init__(self, bindir: Path, root: Path, run_as: str | None) -> None:
        self.bindir, self.root, self.run_as = bindir, root, run_as
        self.data, self.socket_dir, self.log = root / "data", root / "socket", root / "server.log"

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        return subprocess.run(
            command, cwd=self.root, capture_output=True, text=True, timeout=timeout, check=False
        )

    def init(self) -> None:
        self.socket_dir.mkdir()
        if self.run_as is not None:
            entry = pwd.getpwnam(self.run_as)
            for path in (self.root, self.socket_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        done = self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "-A", "trust",
            "-E", "UTF8", "--no-sync", "--no-instructions",
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-2000:]}")

    def start(self) -> None:
        options = (
            f"-k {self.socket_dir} -p {PORT} -c listen_addresses='' -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=300"
        )
        done = self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
            "-o", options, "start",
        )  # fmt: skip
        if done.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log}")

    def stop(self, mode: str = "fast") -> None:
        done = self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-m", mode, "stop")
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl stop failed: {done.stderr.strip()}")

    def running(self) -> bool:
        return self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "status").returncode == 0

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@/{database}?host={self.socket_dir}&port={PORT}"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(
            host=str(self.socket_dir), port=PORT, user=SUPERUSER, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        self._admin(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def start_cluster() -> Cluster:
    """initdb and start a cluster in a fresh temporary folder, or skip (saying why) when this machine cannot."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install -e '.[postgres]')")
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL not found: no initdb on PATH or in /usr/lib/postgresql/*/bin")
    run_as = None
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        run_as = _unprivileged_user()
        if run_as is None or shutil.which("runuser") is None:
            pytest.skip(
                "running as root, and no unprivileged user (postgres, nobody) or runuser to run PostgreSQL"
            )
    # Not under pytest's own temporary folder: that one is private to root, and the server runs as `run_as`.
    root = Path(tempfile.mkdtemp(prefix="semworld-pg-"))
    cluster = Cluster(bindir, root, run_as)
    cluster.init()
    cluster.start()
    return cluster
