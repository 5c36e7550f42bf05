"""PostgresQueue on a real PostgreSQL: connecting, the table, rows, and its mistakes.

The promises it shares with RedisStream (batches, back-pressure, drains,
leases, SIGKILL) are in test_sources_servers.py and test_sources_kill.py.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from servers import PostgresServer, free_port
from sluicegate import run_stream
from sluicegate.sources import PostgresQueue, QueueRow, consume


async def never(row: QueueRow) -> None:
    raise AssertionError("no row may be claimed")


def table_exists(dsn: str, name: str) -> bool:
    with psycopg.connect(dsn) as connection:
        row = connection.execute("SELECT to_regclass(%s) IS NOT NULL", [name]).fetchone()
        assert row is not None
        return bool(row[0])


@pytest.mark.parametrize("form", ["url", "keywords"])
async def test_a_refused_connection_names_the_dsn_without_its_password(form: str) -> None:
    port = free_port()
    dsn = (
        f"postgresql://me:hunter2@127.0.0.1:{port}/db"
        if form == "url"
        else f"host=127.0.0.1 port={port} user=me password=hunter2 dbname=db"
    )
    with pytest.raises(ConnectionError) as caught:
        async with consume(PostgresQueue(dsn, "jobs")) as feed:
            await run_stream(feed, never, window=2)
    message = str(caught.value)
    assert message.startswith(f"cannot connect to PostgreSQL at {dsn.replace('hunter2', '***')}:")
    assert "hunter2" not in message and "refused" in message


async def test_bad_credentials_fail_before_the_table_is_created(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    wrong = postgres_dsn.replace(f":{postgres_server.password}@", ":wrong@")
    with pytest.raises(ConnectionError, match="password authentication failed") as caught:
        async with consume(PostgresQueue(wrong, "jobs", create=True)) as feed:
            await run_stream(feed, never, window=2)
    assert ":***@" in str(caught.value) and "wrong" not in str(caught.value).split(" at ")[1][:60]
    assert not table_exists(postgres_dsn, "jobs")


async def test_a_missing_table_is_refused_and_create_makes_it(postgres_dsn: str) -> None:
    with pytest.raises(ValueError, match=r"the table 'jobs' at postgresql://\S+:\*\*\*@") as caught:
        async with consume(PostgresQueue(postgres_dsn, "jobs")) as feed:
            await run_stream(feed, never, window=2)
    assert "create=True" in str(caught.value) and "schema_sql()" in str(caught.value)
    async with PostgresQueue(postgres_dsn, "jobs", create=True) as queue:
        assert await queue.put({"a": 1}, [2], "three", None) == [1, 2, 3, 4]
    assert table_exists(postgres_dsn, "jobs") and table_exists(postgres_dsn, "jobs_ready")


async def test_a_table_without_the_queue_columns_is_refused(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE jobs (id bigserial PRIMARY KEY, payload jsonb)")
    with pytest.raises(ValueError, match='is not a queue table: column "claimed_by" does not'):
        async with PostgresQueue(postgres_dsn, "jobs"):
            pass


async def test_a_table_in_a_schema_and_its_sql(postgres_dsn: str) -> None:
    sql = PostgresQueue.schema_sql("queues.jobs")
    assert sql.startswith('CREATE TABLE IF NOT EXISTS "queues"."jobs" (\n    id ')
    assert 'CREATE INDEX IF NOT EXISTS "jobs_ready" ON "queues"."jobs" (id)' in sql
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        connection.execute("CREATE SCHEMA queues")
        connection.execute(sql)
    async with PostgresQueue(postgres_dsn, "queues.jobs", stop_when_empty=True) as queue:
        await queue.put({"n": 1})
        (row,) = await queue.claim(4) or []
        assert row.payload == {"n": 1} and row.deliveries == 1
        await queue.acknowledge([row])
        assert await queue.claim(4) is None


async def test_acknowledged_rows_may_be_kept_as_done(postgres_dsn: str) -> None:
    async with PostgresQueue(postgres_dsn, "jobs", create=True) as producer:
        await producer.put(*range(5))
    queue = PostgresQueue(postgres_dsn, "jobs", delete=False, stop_when_empty=True)
    async with consume(queue) as feed:
        ran = await run_stream(feed, _payload, window=2)
        with pytest.raises(RuntimeError, match="is open already"):
            await queue.open()
    assert sorted(ran) == list(range(5))
    with psycopg.connect(postgres_dsn) as connection:
        rows = connection.execute(
            "SELECT payload, done_at IS NOT NULL, claimed_by FROM jobs ORDER BY id"
        ).fetchall()
    assert rows == [(n, True, None) for n in range(5)]


async def _payload(row: QueueRow) -> Any:
    return row.payload


async def test_a_released_row_is_claimed_again_at_once_and_counts_its_deliveries(
    postgres_dsn: str,
) -> None:
    async with (
        PostgresQueue(postgres_dsn, "jobs", create=True, consumer="a", lease=3600) as a,
        PostgresQueue(postgres_dsn, "jobs", consumer="b", lease=3600) as b,
    ):
        await a.put("x", "y")
        first, second = await a.claim(2) or []
        assert [first.payload, second.payload] == ["x", "y"]
        assert await b.claim(2) == []  # both held by a
        await a.release([second])
        (again,) = await b.claim(2) or []
        assert (again.id, again.payload, again.deliveries) == (second.id, "y", 2)
        assert await a.renew([first, second]) == [second]  # b holds it now
        await b.acknowledge([again])
        await a.acknowledge([first])
    with psycopg.connect(postgres_dsn) as connection:
        assert connection.execute("SELECT count(*) FROM jobs").fetchone() == (0,)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"dsn": 5}, TypeError, r"^dsn must be a str \(postgresql://host/db\), not 5$"),
        ({"dsn": "host=h port"}, ValueError, r"^dsn must be a PostgreSQL URL or key=value string"),
        ({"table": ""}, ValueError, r'^table must be a table name \("jobs" or "schema.jobs"\)'),
        ({"table": "a.b.c"}, ValueError, r"^table must be a table name .*, not 'a.b.c'$"),
        ({"table": None}, TypeError, r"^table must be a table name .*, not None$"),
        ({"consumer": 7}, TypeError, r"^consumer must be a non-empty str or None, not 7$"),
        ({"batch": 0}, ValueError, r"^batch must be an int >= 1, not 0$"),
        ({"lease": -1}, ValueError, r"^lease must be a finite number of seconds > 0, not -1$"),
        ({"poll": 0}, ValueError, r"^poll must be a finite number of seconds > 0, not 0$"),
        ({"create": "yes"}, TypeError, r"^create must be True or False, not 'yes'$"),
        ({"delete": None}, TypeError, r"^delete must be True or False, not None$"),
    ],
)
def test_arguments_are_checked_when_it_is_made(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    given = {"dsn": "postgresql://127.0.0.1:1/db", "table": "jobs", **arguments}
    with pytest.raises(error, match=message):
        PostgresQueue(**given)


def test_its_repr_hides_the_password() -> None:
    queue = PostgresQueue("postgresql://me:hunter2@h/db", "jobs", consumer="c1")
    assert repr(queue) == "<PostgresQueue postgresql://me:***@h/db table='jobs' consumer='c1'>"
    assert queue.consumer == "c1" and queue.batch == 64 and queue.lease == 30.0


async def test_a_server_lost_mid_stream_is_a_connection_error_naming_it(
    postgres_dsn: str,
) -> None:
    queue = PostgresQueue(postgres_dsn, "jobs", create=True, consumer="doomed")
    with pytest.raises(RuntimeError, match="is not open: use `async with` or consume"):
        await queue.claim(1)
    async with queue:
        await queue.put(1)
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'sluicegate' AND datname = current_database()"
            )
        with pytest.raises(ConnectionError, match=r"^lost the PostgreSQL server at postgresql:"):
            await queue.claim(1)
