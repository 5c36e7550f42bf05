"""Real redis-server and PostgreSQL, started on 127.0.0.1 for the tests and the benchmark.

Both come from Debian's packages (``redis-server``, ``postgresql-15``; CI's
``.ci/run`` installs them when missing). Each server runs in a temporary
directory at a free port, with a password, and is stopped and removed after.
PostgreSQL refuses to run as root, so when the tests run as root its data
directory belongs to an unprivileged system user (created if missing) and
its commands run as that user.

This module is plain Python (no pytest), so ``bench/queues.py`` starts its
servers with it too; ``server_fixtures.py`` makes pytest fixtures of it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import attrs

REDIS_SERVER = Path("/usr/bin/redis-server")
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
# The unprivileged user PostgreSQL runs as when the tests run as root.
POSTGRES_USER = "sluicegate-pg"
# How long a server may take to start or stop, in seconds.
START_TIMEOUT = 60
PASSWORD = "s3cret-sluicegate"
# Databases a Redis server offers, so that each test can have one of its own.
REDIS_DATABASES = 4096


def missing_redis() -> str | None:
    """Why a Redis server cannot be started here, or None."""
    if not os.access(REDIS_SERVER, os.X_OK):
        return f"no redis-server at {REDIS_SERVER}: install Debian's redis-server (.ci/run does)"
    return None


def missing_postgres() -> str | None:
    """Why a PostgreSQL server cannot be started here, or None."""
    for name in ("initdb", "pg_ctl", "postgres"):
        if not os.access(POSTGRES_BIN / name, os.X_OK):
            return f"no {name} in {POSTGRES_BIN}: install Debian's postgresql-15 (.ci/run does)"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@attrs.frozen
class RedisServer:
    """A running redis-server: where it listens and its password."""

    host: str
    port: int
    password: str

    def url(self, db: int = 0) -> str:
        """The URL of database ``db``, password included."""
        return f"redis://:{self.password}@{self.host}:{self.port}/{db}"


@attrs.frozen
class PostgresServer:
    """A running PostgreSQL: where it listens and the superuser's name and password."""

    host: str
    port: int
    user: str
    password: str

    def dsn(self, database: str = "postgres") -> str:
        """The URL of ``database``, as the superuser, password included."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{database}"


@contextlib.contextmanager
def running_redis() -> Iterator[RedisServer]:
    """Start a redis-server for the block; stop it and remove its directory after.

    Raises:
        RuntimeError: the server did not start (its output says why).
    """
    with tempfile.TemporaryDirectory(prefix="sluicegate-redis-") as directory:
        for _ in range(5):  # a port taken between free_port() and the bind: try another
            port = free_port()
            config = Path(directory) / "redis.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {directory}\nsave ''\nappendonly no\n"
                f"requirepass {PASSWORD}\ndatabases {REDIS_DATABASES}\ndaemonize no\n"
                "loglevel notice\nlogfile ''\n"
            )
            process = subprocess.Popen(
                [str(REDIS_SERVER), str(config)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            assert process.stdout is not None
            output = []
            # Its log says when it accepts connections; it exits if it cannot bind.
            for line in process.stdout:
                output.append(line)
                if "Ready to accept connections" in line:
                    break
            else:
                process.wait(START_TIMEOUT)
                process.stdout.close()
                if "Address already in use" in "".join(output):
                    continue
                raise RuntimeError("redis-server did not start:\n" + "".join(output))
            try:
                # Keep reading its log, or a full pipe would block the server.
                drain = _Drainer(process.stdout)
                yield RedisServer("127.0.0.1", port, PASSWORD)
            finally:
                process.terminate()
                try:
                    process.wait(START_TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                drain.join()
                process.stdout.close()
            return
        raise RuntimeError("redis-server found no free port in 5 tries")


class _Drainer:
    """Reads a child's output in a thread until it closes."""

    def __init__(self, stream: object) -> None:
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    @staticmethod
    def _read(stream: object) -> None:
        for _ in stream:  # type: ignore[attr-defined]
            pass

    def join(self) -> None:
        self._thread.join(START_TIMEOUT)


def _postgres_owner() -> str | None:
    """The user PostgreSQL runs as: None for the current one, unless that is root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(POSTGRES_USER)
    except KeyError:
        done = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
             POSTGRES_USER],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0 and "already exists" not in done.stderr:
            return "nobody"  # no useradd here: nobody is unprivileged too
    return POSTGRES_USER


def _as(owner: str | None, argv: list[str]) -> list[str]:
    return argv if owner is None else ["runuser", "-u", owner, "--", *argv]


@contextlib.contextmanager
def running_postgres(*, durable: bool = False) -> Iterator[PostgresServer]:
    """Start a PostgreSQL cluster for the block; stop it and remove its directory after.

    The cluster listens on 127.0.0.1 only, takes passwords (SCRAM), and has
    ``pg_stat_statements`` loaded so that a test can count the statements a
    client sent. For the tests it does not wait for the disk (no fsync, no
    synchronous commit); ``durable=True`` keeps PostgreSQL's defaults, so
    every commit waits for its WAL to reach the disk, as in production (what
    the benchmark measures against).

    Raises:
        RuntimeError: the cluster could not be made or started (the output says why).
    """
    owner = _postgres_owner()
    directory = Path(tempfile.mkdtemp(prefix="sluicegate-postgres-"))
    try:
        if owner is not None:
            shutil.chown(directory, owner, owner)
        data = directory / "data"
        secret = directory / "password"
        secret.write_text(PASSWORD + "\n")
        if owner is not None:
            shutil.chown(secret, owner, owner)
        user = "sluicegate"
        _check(
            _as(owner, [str(POSTGRES_BIN / "initdb"), "-D", str(data), "-U", user,
                        f"--pwfile={secret}", "--auth=scram-sha-256", "-E", "UTF8",
                        "--locale=C", "--no-sync"]),
            "initdb",
        )  # fmt: skip
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                "listen_addresses = '127.0.0.1'\n"
                "unix_socket_directories = ''\n"
                + (
                    ""
                    if durable
                    else "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                )
                + "max_connections = 200\n"
                "shared_preload_libraries = 'pg_stat_statements'\n"
                "pg_stat_statements.track_utility = off\n"
            )
        log = directory / "server.log"
        for _ in range(5):  # a port taken between free_port() and the bind: try another
            port = free_port()
            done = subprocess.run(
                _as(owner, [str(POSTGRES_BIN / "pg_ctl"), "-D", str(data), "-l", str(log),
                            "-o", f"-p {port}", "-w", "-t", str(START_TIMEOUT), "start"]),
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode == 0:
                break
            text = log.read_text() if log.exists() else ""
            if "could not bind" not in text and "already in use" not in text:
                raise RuntimeError(f"PostgreSQL did not start:\n{done.stdout}{done.stderr}{text}")
        else:
            raise RuntimeError("PostgreSQL found no free port in 5 tries")
        try:
            yield PostgresServer("127.0.0.1", port, user, PASSWORD)
        finally:
            subprocess.run(
                _as(owner, [str(POSTGRES_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate",
                            "-w", "-t", str(START_TIMEOUT), "stop"]),
                capture_output=True, check=False,
            )  # fmt: skip
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _check(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stdout}{done.stderr}")
