"""Fixtures for the real servers of ``servers.py`` (a pytest plugin; conftest.py loads it).

* ``redis_server`` / ``postgres_server`` (session): one server each for the
  whole run, started on first use, stopped at the end. A test is skipped,
  saying why, only when the server's binaries are not installed.
* ``redis_url`` (per test): the URL (password included) of a database of its
  own on that server, emptied first.
* ``postgres_dsn`` (per test): the URL of a fresh database of its own.

Any test, or another fixture, may use them; nothing here mocks a server.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from servers import (
    REDIS_DATABASES,
    PostgresServer,
    RedisServer,
    missing_postgres,
    missing_redis,
    running_postgres,
    running_redis,
)

_databases = itertools.count(1)

# The environment variables a docs block or an example reads a server's
# address from, as a program would, and the fixture that gives one.
SERVER_VARIABLES = {"REDIS_URL": "redis_url", "DATABASE_URL": "postgres_dsn"}


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server on 127.0.0.1 for the whole session."""
    why = missing_redis()
    if why is not None:
        pytest.skip(why)
    with running_redis() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The URL of an empty database of the session's Redis server, this test's alone."""
    import redis

    # Database 0 is left to code that connects without a database number.
    url = redis_server.url(next(_databases) % (REDIS_DATABASES - 1) + 1)
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return url


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL cluster on 127.0.0.1 for the whole session, run by an unprivileged user."""
    why = missing_postgres()
    if why is not None:
        pytest.skip(why)
    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The URL of a fresh database on the session's PostgreSQL, this test's alone."""
    import psycopg

    name = f"test_{next(_databases)}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    return postgres_server.dsn(name)
