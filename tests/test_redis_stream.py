"""RedisStream on a real redis-server: connecting, the group, entries, and its mistakes.

The promises it shares with PostgresQueue (batches, back-pressure, drains,
leases, SIGKILL) are in test_sources_servers.py and test_sources_kill.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
import trio

from servers import RedisServer, free_port
from sluicegate import Drain, run_stream
from sluicegate.sources import RedisStream, StreamEntry, consume

HANG = 60


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


async def never(entry: StreamEntry) -> None:
    raise AssertionError("no entry may be claimed")


async def test_a_refused_connection_names_the_url_without_its_password() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    with pytest.raises(ConnectionError) as caught:
        async with consume(RedisStream(url, "jobs", "workers")) as feed:
            await run_stream(feed, never, window=2)
    message = str(caught.value)
    assert message.startswith(
        f"cannot connect to the Redis server at {url.replace('hunter2', '***')}"
    )
    assert "hunter2" not in message and "refused" in message


@pytest.mark.parametrize("password", ["wrong", None])
async def test_bad_credentials_fail_before_anything_is_created(
    redis_server: RedisServer, redis_url: str, password: str | None
) -> None:
    url = redis_url.replace(f":{redis_server.password}@", f":{password}@" if password else "")
    with pytest.raises(ConnectionError, match="it refused the credentials") as caught:
        async with consume(RedisStream(url, "jobs", "workers")) as feed:
            await run_stream(feed, never, window=2)
    assert redis_server.password not in str(caught.value)
    if password:
        assert f":{password}@" not in str(caught.value) and ":***@" in str(caught.value)
    assert client(redis_url).exists("jobs") == 0  # no stream, no group


async def test_a_key_that_is_not_a_stream_is_refused_before_any_claim(redis_url: str) -> None:
    client(redis_url).set("jobs", "a string")
    with pytest.raises(
        ValueError, match=r"the key 'jobs' at redis://:\*\*\*@.* holds something other"
    ):
        async with consume(RedisStream(redis_url, "jobs", "workers")) as feed:
            await run_stream(feed, never, window=2)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"url": b"redis://h"}, TypeError, r"^url must be a str \(redis://host:port/db\), not b"),
        (
            {"url": "http://user:hunter2@h/0"},
            ValueError,
            r"^url must be a redis://, rediss:// or unix:// URL, not 'http://user:\*\*\*@h/0'$",
        ),
        ({"url": "redis://h:port/0"}, ValueError, r"with a numeric port, not 'redis://h:port/0'"),
        ({"url": "redis://:pw@[::1/0"}, ValueError, r"numeric port, not 'redis://\*\*\*@\[::1/0'"),
        ({"stream": ""}, ValueError, r"^stream must be a non-empty str, not ''$"),
        ({"group": 3}, TypeError, r"^group must be a non-empty str, not 3$"),
        ({"consumer": ""}, ValueError, r"^consumer must be a non-empty str or None, not ''$"),
        ({"batch": 0}, ValueError, r"^batch must be an int >= 1, not 0$"),
        ({"lease": 0}, ValueError, r"^lease must be a finite number of seconds > 0, not 0$"),
        ({"lease": "30"}, TypeError, r"^lease must be a finite number of seconds > 0, not '30'$"),
        ({"stop_when_empty": 1}, TypeError, r"^stop_when_empty must be True or False, not 1$"),
        ({"start": ""}, ValueError, r"^start must be a non-empty str, not ''$"),
    ],
)
def test_arguments_are_checked_when_it_is_made(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    given = {"url": "redis://127.0.0.1:1/0", "stream": "jobs", "group": "workers", **arguments}
    with pytest.raises(error, match=message):
        RedisStream(**given)


def test_its_repr_hides_the_password() -> None:
    stream = RedisStream("redis://:hunter2@h:1/0", "jobs", "workers", consumer="c1")
    assert repr(stream) == (
        "<RedisStream redis://:***@h:1/0 stream='jobs' group='workers' consumer='c1'>"
    )
    assert stream.consumer == "c1" and stream.batch == 64 and stream.lease == 30.0
    assert RedisStream("redis://h", "jobs", "workers").consumer != stream.consumer
    in_query = RedisStream("redis://me@h/0?password=hunter2&db=2", "jobs", "workers")
    assert "redis://me@h/0?password=***&db=2 " in repr(in_query)


async def test_fields_that_are_not_utf8_arrive_as_surrogates(redis_url: str) -> None:
    raw = redis.Redis.from_url(redis_url)
    raw.xadd("jobs", {b"name": b"caf\xe9"})
    async with RedisStream(redis_url, "jobs", "workers") as stream:
        (entry,) = await stream.claim(1) or []
        assert entry.fields == {"name": "caf\udce9"}
        assert entry.fields["name"].encode("utf-8", "surrogateescape") == b"caf\xe9"
        await stream.acknowledge([entry])


async def test_a_new_group_starts_where_it_is_told(redis_url: str) -> None:
    client(redis_url).xadd("jobs", {"n": "old"})
    async with RedisStream(redis_url, "jobs", "new", start="$", stop_when_empty=True) as late:
        assert await late.claim(8) is None
        await late.put({"n": "new"})
        (entry,) = await late.claim(8) or []
        assert entry.fields == {"n": "new"} and not entry.redelivered
    async with RedisStream(redis_url, "jobs", "all", stop_when_empty=True) as early:
        taken = await early.claim(8) or []
        assert [entry.fields["n"] for entry in taken] == ["old", "new"]


async def test_released_entries_go_to_another_consumer_at_once_and_deleted_ones_are_dropped(
    redis_url: str,
) -> None:
    async with RedisStream(redis_url, "jobs", "workers", consumer="a", lease=3600) as a:
        ids = await a.put(*({"n": str(i)} for i in range(5)))
        taken = await a.claim(5) or []
        assert [entry.id for entry in taken] == ids
        client(redis_url).xdel("jobs", ids[1])
        await a.release(taken)
    async with RedisStream(redis_url, "jobs", "workers", consumer="b", lease=3600) as b:
        again = await b.claim(5) or []
        assert [entry.id for entry in again] == [ids[0], *ids[2:]]
        assert all(entry.redelivered for entry in again)
        assert await b.renew(again) == []
        await b.acknowledge(again)
    assert client(redis_url).xpending("jobs", "workers")["pending"] == 0


async def test_a_renewal_reports_entries_another_consumer_took(redis_url: str) -> None:
    async with (
        RedisStream(redis_url, "jobs", "workers", consumer="a") as a,
        RedisStream(redis_url, "jobs", "workers", consumer="b") as b,
    ):
        await a.put({"n": "0"}, {"n": "1"})
        first, second = await a.claim(2) or []
        await a.release([second])
        (taken,) = await b.claim(2) or []  # what a released
        assert taken.id == second.id
        assert await a.renew([first, second]) == [second]


async def test_a_consumer_holding_nothing_leaves_the_group_when_it_closes(redis_url: str) -> None:
    drain = Drain()

    async def run(entry: StreamEntry) -> None:
        drain.request()

    async with RedisStream(redis_url, "jobs", "workers") as producer:
        await producer.put({"n": "0"})
    with trio.fail_after(HANG):
        async with consume(RedisStream(redis_url, "jobs", "workers", consumer="c1")) as feed:
            await run_stream(feed, run, window=1, drain=drain)
    names = [consumer["name"] for consumer in client(redis_url).xinfo_consumers("jobs", "workers")]
    assert names == []  # c1 left; the producer never claimed, so never joined


async def test_a_claim_cancelled_while_it_reads_loses_nothing(
    redis_url: str, mock_clock: trio.testing.MockClock
) -> None:
    # trio's clock stands still, so after the first claim no look for a dead
    # consumer's entries is due: every claim goes straight to the blocking read.
    async with RedisStream(redis_url, "jobs", "workers", consumer="a") as a:
        await a.put({"n": "0"})
        (first,) = await a.claim(1) or []
        ids = await a.put(*({"n": str(i)} for i in range(1, 4)))
        with trio.CancelScope() as scope:
            scope.cancel()
            await a.claim(3)  # the read happens all the same, in its thread
        # What it read is not lost, nor left to its lease: the next claim has it.
        again = await a.claim(3) or []
        assert [entry.id for entry in again] == ids
        more = await a.put({"n": "4"})
        with trio.CancelScope() as scope:
            scope.cancel()
            await a.claim(3)
        await a.acknowledge([first, *again])
    # Closing released what the last cancelled read took.
    async with RedisStream(redis_url, "jobs", "workers", consumer="b", lease=3600) as b:
        taken = await b.claim(8) or []
        assert [entry.id for entry in taken] == more and taken[0].redelivered


async def test_a_server_lost_mid_stream_is_a_connection_error_naming_it(
    redis_url: str, mock_clock: trio.testing.MockClock
) -> None:
    admin = client(redis_url)
    admin.acl_setuser("doomed", enabled=True, passwords=["+doomed-pw"], keys="*",
                      commands=["+@all"])  # fmt: skip
    url = redis_url.replace(redis_url.split("@")[0], "redis://doomed:doomed-pw")
    stream = RedisStream(url, "jobs", "workers")
    with pytest.raises(RuntimeError, match="is not open: use `async with` or consume"):
        await stream.claim(1)
    async with stream:
        await stream.put({"n": "0"})
        assert len(await stream.claim(1) or []) == 1
        admin.acl_deluser("doomed")  # drops its connections; reconnecting fails
        with pytest.raises(
            ConnectionError, match=r"^lost the Redis server at redis://doomed:\*\*\*@"
        ):
            await stream.claim(1)
        with pytest.raises(ConnectionError, match="lost the Redis server"):
            await stream.put({"n": "1"})
