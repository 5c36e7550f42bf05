"""One service on several hosts: the Postgres journal against the SQLite one, and SIGKILLs.

Run it with ``python bench/hosts.py`` (``--quick`` for a smoke-sized run).
It starts a PostgreSQL of its own with its defaults (every commit waits for
the disk, as in production; tests/servers.py, the tests' fixtures), or uses
yours (``--postgres-dsn``; it creates and drops tables named
``sluicegate_bench_*``). Parts (issue 31), each skippable:

* ``throughput``: one host, one process: ``serve()`` over N keys (window
  64) with a SQLite journal (``synchronous="normal"``) and with the Postgres
  journal, the cases taking turns repeat by repeat; on no-op items and on
  1 ms items. Target: the Postgres journal does at least half the SQLite
  journal's items per second.
* ``hosts``: three processes (tests/host_child.py) fed the same 10,000 keys,
  started at once: each key must run exactly once; the share of each host
  is printed.
* ``kills``: three processes fed the same 10,000 keys, rounds after rounds
  until at least 50 SIGKILLs: two run to the end, the third is killed at a
  random moment once it runs, started again, killed again... Every key must
  settle (an outcome each, no claim left), a key may run twice only if a
  killed host was running it, and a killed host's keys must run again
  within its lease and a second once the other hosts have come to them
  (those they had read past when it died; the rest run in their turn). The
  longest such wait, and how many keys ran twice, are printed.

The exit status is 0 unless ``--check`` is given and a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import trio

import sluicegate
from run import SLEEP, Row, check, noop, print_table, sleeping
from sluicegate.service import Journal, PostgresJournal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from servers import running_postgres  # noqa: E402

CHILD = ROOT / "tests" / "host_child.py"
WINDOW = 64
LEASE = 2.0  # seconds, the hosts' in the kills part


# -- throughput: one host -------------------------------------------------------------


async def served(journal: Any, work: Any, n: int) -> None:
    report = await sluicegate.serve(
        range(n), work, window=WINDOW, key=str, journal=journal, signals=()
    )
    assert report.ok == n, report


def drop(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f"DROP TABLE IF EXISTS {table}, {table}_claims")


def throughput(dsn: str, n: int, repeats: int) -> list[str]:
    missed = []
    for label, work, items in (("no-op", noop, n), ("1 ms", sleeping, n // 2)):
        rows = {name: Row(name, items) for name in ("SQLite journal", "Postgres journal")}
        for rep in range(repeats + 1):  # the first is a warm-up
            order = list(rows) if rep % 2 else list(reversed(rows))
            for name in order:
                with tempfile.TemporaryDirectory() as directory:
                    if name == "SQLite journal":
                        journal: Any = Journal(f"{directory}/journal.db")
                    else:
                        drop(dsn, "sluicegate_bench_one")
                        journal = PostgresJournal(dsn, table="sluicegate_bench_one")
                    cpu = time.process_time()
                    start = time.perf_counter()
                    trio.run(served, journal, work, items if rep else min(items, 1000))
                    if rep:
                        rows[name].times.append(time.perf_counter() - start)
                        rows[name].cpu.append(time.process_time() - cpu)
        ours, base = rows["Postgres journal"], rows["SQLite journal"]
        check(ours, base, 0.5, "SQLite")
        print_table(f"One host, {label} items ({SLEEP * 1000:g} ms), {items:,} keys"
                    if label != "no-op" else f"One host, no-op items, {items:,} keys",
                    rows.values(), base)  # fmt: skip
        print(f"  Postgres journal vs SQLite journal: {ours.rate / base.rate:.2f}x")
        if not ours.ok:
            missed.append(f"throughput, {label}")
    return missed


# -- several hosts --------------------------------------------------------------------


def start_host(
    dsn: str, name: str, n: int, log: Path, *, sleep: float, window: int, wait: bool = False
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, str(CHILD), dsn, name, str(n), str(log), "--lease", str(LEASE),
         "--sleep", str(sleep), "--window", str(window), *(["--wait"] if wait else [])],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def read_log(path: Path) -> Iterator[list[str]]:
    text = path.read_text() if path.exists() else ""
    for line in text[: text.rfind("\n") + 1].splitlines():
        yield line.split()


def three_hosts(dsn: str, n: int) -> list[str]:
    drop(dsn, "sluicegate_journal")
    with tempfile.TemporaryDirectory() as directory:
        log = Path(directory) / "hosts.log"
        hosts = [start_host(dsn, f"h{i}", n, log, sleep=0.01, window=16, wait=True)
                 for i in range(3)]  # fmt: skip
        time.sleep(2)  # let them import and connect: then go at once
        began = time.perf_counter()
        for host in hosts:
            assert host.stdin is not None
            host.stdin.write("go\n")
            host.stdin.flush()
        for host in hosts:
            _, stderr = host.communicate(timeout=600)
            assert host.returncode == 0, stderr
        took = time.perf_counter() - began
        ran: dict[str, list[str]] = defaultdict(list)
        share: dict[str, int] = {}
        for word in read_log(log):
            if word[0] == "ran":
                ran[word[2]].append(word[1])
            else:
                share[word[1]] = int(word[2])
    twice = sum(1 for hosts_of in ran.values() if len(hosts_of) > 1)
    print(f"\nThree hosts fed the same {n:,} keys (items of 0-10 ms, window 16 each, at once)")
    shares = ", ".join(f"{name} {ok:,}" for name, ok in sorted(share.items()))
    print(f"  {len(ran):,} keys ran, {twice} of them more than once, in {took:.1f} s")
    print(f"  each host's share: {shares}")
    counts = PostgresJournal(dsn).counts()
    print(f"  journal: {counts}")
    ok = len(ran) == n and twice == 0 and counts["ok"] == n
    print("  each key ran exactly once: " + ("PASS" if ok else "MISS"))
    return [] if ok else ["three hosts: each key once"]


def held_by(dsn: str, pid: int) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as db:
        found = db.execute(
            "SELECT key FROM sluicegate_journal_claims WHERE claimed_by LIKE %s",
            [f"%-{pid}-%"],
        ).fetchall()
    return {key for (key,) in found}


def kill_round(dsn: str, n: int, rng: random.Random, most: int) -> dict[str, Any]:
    """One round of kills over ``n`` fresh keys; what it found."""
    drop(dsn, "sluicegate_journal")
    sleep, window = 0.05, 8  # items of 25 ms on average: a round lasts a while
    with tempfile.TemporaryDirectory() as directory:
        log = Path(directory) / "hosts.log"
        steady = [start_host(dsn, f"h{i}", n, log, sleep=sleep, window=window) for i in (1, 2)]
        kills: list[tuple[str, float, set[str]]] = []
        victim = start_host(dsn, "k0", n, log, sleep=sleep, window=window)
        try:
            while len(kills) < most:
                name = f"k{len(kills)}"
                deadline = time.monotonic() + 60
                while victim.poll() is None and time.monotonic() < deadline:
                    if any(w[0] == "ran" and w[1] == name for w in read_log(log)):
                        break
                    time.sleep(0.01)
                time.sleep(rng.uniform(0, 0.6))  # a random moment once it runs
                if victim.poll() is not None:
                    break  # it finished first: the round is over
                victim.send_signal(signal.SIGKILL)
                when = time.monotonic()
                victim.communicate(timeout=60)
                kills.append((name, when, held_by(dsn, victim.pid)))
                victim = start_host(dsn, f"k{len(kills)}", n, log, sleep=sleep, window=window)
            for process in (victim, *steady):
                _, stderr = process.communicate(timeout=600)
                assert process.returncode == 0, stderr
        finally:
            for process in (victim, *steady):
                if process.poll() is None:
                    process.kill()
                    process.communicate()
        runs: dict[str, list[tuple[str, float]]] = defaultdict(list)
        for word in read_log(log):
            if word[0] == "ran":
                runs[word[2]].append((word[1], float(word[3])))
    counts = PostgresJournal(dsn).counts()
    with psycopg.connect(dsn, autocommit=True) as db:
        (claims,) = db.execute("SELECT count(*) FROM sluicegate_journal_claims").fetchone() or (0,)
    killed = {name for name, _, _ in kills}
    twice = [key for key, where in runs.items() if len(where) > 1]
    wrong_twice = [key for key in twice if not all(h in killed for h, _ in runs[key][:-1])]
    waits: list[float] = []
    all_waits: list[float] = []
    for number, (name, when, held) in enumerate(kills):
        passed = max(
            (int(key) for key, where in runs.items()
             for host, t in where if host in ("h1", "h2") and t <= when),
            default=-1,
        )  # fmt: skip
        for key in held:
            later = [t for host, t in runs[key] if host != name and t > when]
            if not later:
                continue  # committed by the killed host in its last instant
            if any(key in h and w < min(later) for _, w, h in kills[number + 1 :]):
                continue  # the next incarnation held it when it was killed in turn
            all_waits.append(min(later) - when)
            if int(key) < passed:
                waits.append(min(later) - when)
    return {
        "kills": len(kills),
        "settled": counts["ok"] == n and claims == 0 and len(runs) == n,
        "twice": len(twice),
        "wrong_twice": len(wrong_twice),
        "held": sum(len(h) for _, _, h in kills),
        "longest": max(waits, default=0.0),
        "longest_any": max(all_waits, default=0.0),
        "waits": len(waits),
    }


def kills(dsn: str, n: int, at_least: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    print(
        f"\nSIGKILLs: three hosts fed the same {n:,} keys per round (items of 0-50 ms, window 8"
        f" each, lease {LEASE:g} s), one of them killed at random moments and started again"
    )
    print(
        f"  {'round':>5} {'kills':>5} {'settled':>8} {'held':>6} {'ran twice':>9} "
        f"{'not at a kill':>13} {'waited for':>10} {'longest':>8} {'longest, any':>12}"
    )
    total = 0
    rounds = []
    while total < at_least:
        found = kill_round(dsn, n, rng, min(20, at_least - total + 5))
        rounds.append(found)
        total += found["kills"]
        settled = "yes" if found["settled"] else "NO"
        print(
            f"  {len(rounds):>5} {found['kills']:>5} {settled:>8} {found['held']:>6,} "
            f"{found['twice']:>9,} {found['wrong_twice']:>13} {found['waits']:>10,} "
            f"{found['longest']:>7.2f}s {found['longest_any']:>11.2f}s"
        )
    longest = max(r["longest"] for r in rounds)
    ok = (
        all(r["settled"] for r in rounds)
        and not any(r["wrong_twice"] for r in rounds)
        and longest <= LEASE + 1.0
    )
    print(f"  {total} kills: every key settled, a key ran twice only if it was in flight at a "
          f"kill, a killed host's keys ran again within {LEASE + 1:g} s (longest {longest:.2f} s): "
          + ("PASS" if ok else "MISS"))  # fmt: skip
    return [] if ok else ["kills"]


@contextlib.contextmanager
def server(args: argparse.Namespace) -> Iterator[str]:
    if args.postgres_dsn:
        yield args.postgres_dsn
    else:
        with running_postgres(durable=True) as running:
            yield running.dsn()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per case (>= 3)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--postgres-dsn", help="use this PostgreSQL (default: start one)")
    parser.add_argument("--kills", type=int, default=None, help="SIGKILLs at least (50)")
    parser.add_argument("--seed", type=int, default=31, help="the kills' random moments")
    for part in ("throughput", "hosts", "kills"):
        parser.add_argument(f"--no-{part}", action="store_true", help=f"leave out {part}")
    args = parser.parse_args(argv)
    n, keys, at_least, repeats = (2_000, 1_000, 5, 3) if args.quick else (20_000, 10_000, 50, 5)
    if args.repeats is not None:
        repeats = max(3, args.repeats)
    if args.kills is not None:
        at_least = args.kills
    load = os.getloadavg()
    print(
        f"sluicegate {sluicegate.__version__} several-hosts bench: "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"Python {platform.python_version()}, trio {trio.__version__}, "
        f"psycopg {psycopg.__version__}, {os.cpu_count()} CPUs, load {load[0]:.2f}"
        f"{', QUICK (sizes too small for the targets to mean much)' if args.quick else ''}"
    )
    missed: list[str] = []
    with server(args) as dsn:
        with psycopg.connect(dsn) as db:
            print(f"PostgreSQL {db.info.server_version}, synchronous_commit "
                  f"{db.execute('SHOW synchronous_commit').fetchone()}")  # fmt: skip
        if not args.no_throughput:
            missed += throughput(dsn, n, repeats)
        if not args.no_hosts:
            missed += three_hosts(dsn, keys)
        if not args.no_kills:
            missed += kills(dsn, keys, at_least, args.seed)
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f}")
    print("MISSED: " + ", ".join(missed) if missed else "all targets met")
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
