"""The budget ledger: nested limits, micro-units, holds, and several writers at once."""

from __future__ import annotations

import os
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.campaign import (
    MAX_AMOUNT,
    AmountTooLarge,
    BudgetRefused,
    Ledger,
    LedgerError,
    LedgerMissing,
    format_money,
)
from sluicegate.cli import main

D = Decimal


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    ledger = Ledger.create(tmp_path / "ledger.db", D("100"))
    ledger.open_scope(["camp"], D("10"))
    ledger.open_scope(["camp", "a"], D("4"))
    return ledger


def test_amounts_are_stored_in_micro_units_rounded_up(ledger: Ledger) -> None:
    for amount in ("0.0000001", "1.0000001", "0"):
        ledger.reserve(["camp", "a"], D(amount))
    amounts = [r.amount for r in ledger.reservations(["camp"])]
    assert amounts == [D("0.000001"), D("1.000001"), D(0)]
    rid = ledger.reservations(["camp"])[0].id
    ledger.settle(rid, D("0.5"))
    assert ledger.usage(["camp"]).settled == D("0.5")


def test_limits_are_stored_rounded_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Measured before: `init --limit 5.0000001` said 5.0000001 and stored 5.000001.
    path = str(tmp_path / "l.db")
    assert main(["ledger", "init", path, "--limit", "5.0000001"]) == 0
    out = capsys.readouterr().out
    assert (
        out
        == f"created ledger {path} with global limit 5.00 (5.0000001 rounded down to millionths)\n"
    )
    ledger = Ledger(path)
    assert ledger.usage().limit == D("5")
    assert main(["ledger", "raise", path, "--limit", "5.0000009", "--reason", "more"]) == 2
    assert (
        "5.00 (5.0000009 rounded down to millionths) does not raise it" in capsys.readouterr().err
    )
    assert main(["ledger", "raise", path, "--limit", "6.1234567", "--reason", "more"]) == 0
    assert capsys.readouterr().out.endswith("to 6.123456 (6.1234567 rounded down to millionths)\n")
    assert ledger.usage().limit == D("6.123456")
    ledger.open_scope(["camp"], D("1.0000009"))
    assert ledger.usage(["camp"]).limit == D("1")
    ledger.open_scope(["camp"], D("1.0000009"))  # the same limit again: a no-op
    with pytest.raises(BudgetRefused):
        ledger.reserve(["camp", "a"], D("1.0000001"))  # held as 1.000001


def test_floats_and_negative_amounts_are_refused(ledger: Ledger) -> None:
    with pytest.raises(TypeError, match="Decimal"):
        ledger.reserve(["camp"], 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        ledger.reserve(["camp"], D("-1"))
    assert ledger.reservations() == []


def test_amounts_beyond_sqlite_integers_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    assert D(2**63 - 1) / 10**6 == MAX_AMOUNT  # SQLite's largest integer, in millionths
    with pytest.raises(AmountTooLarge):
        Ledger.create(tmp_path / "big.db", D("1e13"))
    assert not (tmp_path / "big.db").exists()

    ledger = Ledger.create(tmp_path / "l.db", MAX_AMOUNT)
    assert ledger.usage().limit == MAX_AMOUNT  # stored exactly
    with pytest.raises(AmountTooLarge):
        ledger.raise_limit(D("1e14"), "more")
    ledger.open_scope(["c"], None)
    for too_big in (MAX_AMOUNT + D("0.000001"), D("1e20"), D("1E+999999")):
        with pytest.raises(AmountTooLarge, match="the most a ledger can store"):
            ledger.reserve(["c", "stage"], too_big)
    with pytest.raises(AmountTooLarge):
        ledger.reserve(["c", "stage"], D("1e20"))
    a = ledger.reserve(["c", "a"], D("1"))
    b = ledger.reserve(["c", "b"], D("1"))
    with pytest.raises(AmountTooLarge):
        ledger.settle(a, D("1e20"))
    ledger.settle(a, MAX_AMOUNT - D("1"))  # the ledger's total is exactly full
    # Each amount fits, but the total would not: SQLite's sum() would overflow.
    with pytest.raises(AmountTooLarge, match="total above"):
        ledger.settle(b, D("2"))
    assert ledger.reservations(["c", "b"])[0].state == "reserved"
    ledger.settle(b, D("1"))
    assert ledger.usage().used == MAX_AMOUNT


def test_refusal_names_the_scope_without_room(ledger: Ledger) -> None:
    ledger.reserve(["camp", "a"], D("3"))
    with pytest.raises(BudgetRefused) as info:
        ledger.reserve(["camp", "a", "stage"], D("1.5"))
    assert info.value.scope == ("camp", "a")
    assert info.value.remaining == D("1")
    assert "camp/a" in str(info.value)
    # A sibling candidate is limited by the campaign scope instead.
    ledger.reserve(["camp", "b"], D("7"))
    with pytest.raises(BudgetRefused) as info:
        ledger.reserve(["camp", "b"], D("0.5"))
    assert info.value.scope == ("camp",)
    assert len(ledger.reservations()) == 2


def test_settle_releases_the_rest_and_an_overrun_blocks_every_scope_it_crosses(
    ledger: Ledger,
) -> None:
    ledger.open_scope(["other"], None)
    rid = ledger.reserve(["camp", "a"], D("2"))
    ledger.settle(rid, D("1.25"))
    assert ledger.usage(["camp", "a"]).remaining == D("2.75")
    rid = ledger.reserve(["camp", "a"], D("2"))
    ledger.settle(rid, D("5"))  # an overrun: more than reserved and than the limit
    usage = ledger.usage(["camp", "a"])
    assert usage.settled == D("6.25")
    assert usage.remaining == D("-2.25")
    with pytest.raises(BudgetRefused) as info:
        ledger.reserve(["camp", "a"], D("0"))
    assert info.value.scope == ("camp", "a")
    # The campaign scope still has room: 10 - 6.25.
    ledger.reserve(["camp", "b"], D("3.75"))
    with pytest.raises(BudgetRefused):
        ledger.reserve(["camp", "b"], D("0.01"))
    # A scope the overrun did not push over is unaffected.
    ledger.reserve(["other"], D("50"))
    with pytest.raises(LedgerError, match="already settled"):
        ledger.settle(rid, D("1"))


def test_uncertain_keeps_its_hold_until_settled(ledger: Ledger) -> None:
    rid = ledger.reserve(["camp", "a"], D("4"))
    ledger.mark_uncertain(rid)
    usage = ledger.usage(["camp", "a"])
    assert (usage.reserved, usage.uncertain, usage.remaining) == (D(0), D(4), D(0))
    with pytest.raises(BudgetRefused):
        ledger.reserve(["camp", "a"], D("0.01"))
    ledger.settle(rid, D("1"))
    assert ledger.usage(["camp", "a"]).remaining == D("3")


def test_scopes_keep_their_limits(ledger: Ledger) -> None:
    ledger.open_scope(["camp"], D("10"))  # the same again: fine
    with pytest.raises(LedgerError, match=r"already exists with limit 10\.00"):
        ledger.open_scope(["camp"], D("11"))
    with pytest.raises(LedgerError, match="global"):
        ledger.open_scope([], D("1"))
    with pytest.raises(ValueError, match="scope parts"):
        ledger.reserve(["a/b"], D("1"))


def test_missing_ledger_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LedgerMissing, match="ledger init"):
        Ledger(tmp_path / "nope.db")
    assert not (tmp_path / "nope.db").exists()
    (tmp_path / "junk.db").write_text("not sqlite")
    with pytest.raises(LedgerError, match="not a sluicegate ledger"):
        Ledger(tmp_path / "junk.db")


def test_cli_init_show_raise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "l.db")
    assert main(["ledger", "init", path, "--limit", "200.00"]) == 0
    assert main(["ledger", "init", path, "--limit", "300"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert Ledger(path).usage().limit == D("200")

    ledger = Ledger(path)
    ledger.open_scope(["camp"], D("20"))
    ledger.mark_uncertain(ledger.reserve(["camp", "k"], D("1.5")))
    ledger.settle(ledger.reserve(["camp", "k"], D("3")), D("2.25"))
    ledger.reserve(["camp", "j"], D("0.1"))
    capsys.readouterr()
    assert main(["ledger", "show", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["scope", "limit", "reserved", "settled", "uncertain", "remaining"]
    table = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert table["global"] == ["200.00", "0.10", "2.25", "1.50", "196.15"]
    assert table["camp"] == ["20.00", "0.10", "2.25", "1.50", "16.15"]
    assert table["camp/k"] == ["-", "0.00", "2.25", "1.50", "-"]

    assert main(["ledger", "raise", path, "--limit", "150", "--reason", "less"]) == 2
    assert "does not raise" in capsys.readouterr().err
    assert main(["ledger", "raise", path, "--limit", "250", "--reason", "approved"]) == 0
    assert Ledger(path).usage().limit == D("250")
    assert Ledger(path).limit_changes()[-1] == (D("200"), D("250"), "approved")
    capsys.readouterr()
    assert main(["ledger", "show", path]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "limit set to 200.00: created",
        "limit raised 200.00 -> 250.00: approved",
    ]

    assert main(["ledger", "show", str(tmp_path / "missing.db")]) == 2
    assert "ledger init" in capsys.readouterr().err


def test_cli_refuses_float_garbage(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["ledger", "init", str(tmp_path / "l.db"), "--limit", "lots"])
    assert not (tmp_path / "l.db").exists()


@pytest.mark.parametrize("action", ["init", "raise"])
def test_cli_refuses_amounts_a_ledger_cannot_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    path = str(tmp_path / "l.db")
    if action == "raise":
        Ledger.create(path, D("10"))
    argv = ["ledger", action, path, "--limit", "1e14"]
    if action == "raise":
        argv += ["--reason", "more"]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --limit: must be at most 9223372036854.775807" in err
    assert "Traceback" not in err
    if action == "init":
        assert not (tmp_path / "l.db").exists()
    else:
        assert Ledger(path).usage().limit == D("10")


_RESERVER = """
import os
import sys
from decimal import Decimal
from sluicegate.campaign import BudgetRefused, Ledger
ledger = Ledger(sys.argv[1])
won = 0
for _ in range(int(sys.argv[2])):
    try:
        ledger.reserve(["camp", sys.argv[3]], Decimal("0.75"))
        won += 1
    except BudgetRefused:
        pass
print(won)
"""


async def test_four_processes_reserving_at_once_never_exceed_the_cap(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path / "l.db", D("1000"))
    ledger.open_scope(["camp"], D("7.5"))  # room for exactly ten reservations of 0.75
    outputs: list[bytes] = []

    async def reserver(name: str) -> None:
        cmd = [sys.executable, "-c", _RESERVER, str(ledger.path), "6", name]
        done = await trio.run_process(cmd, capture_stdout=True)
        outputs.append(done.stdout)

    async with trio.open_nursery() as nursery:
        for name in "abcd":
            nursery.start_soon(reserver, name)
    assert sum(int(out) for out in outputs) == 10
    assert ledger.usage(["camp"]).reserved == D("7.5")
    assert len(ledger.reservations()) == 10


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["reserve", "settle", "uncertain"]),
            st.sampled_from(["a", "b"]),
            st.decimals(min_value=0, max_value=6, places=3),
        ),
        max_size=15,
    )
)
def test_holds_match_a_model_and_reservations_never_cross_a_limit(
    ops: list[tuple[str, str, Decimal]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger.create(Path(tmp) / "l.db", D("12"))
        ledger.open_scope(["c"], D("8"))
        open_ids: list[int] = []
        held: dict[int, Decimal] = {}
        for op, key, amount in ops:
            if op == "reserve":
                before = sum(held.values(), D(0))
                try:
                    rid = ledger.reserve(["c", key], amount)
                except BudgetRefused:
                    assert before + amount > D("8")
                else:
                    assert before + amount <= D("8")
                    open_ids.append(rid)
                    held[rid] = amount
            elif open_ids:
                rid = open_ids.pop(0)
                if op == "settle":
                    ledger.settle(rid, amount)
                    held[rid] = amount
                else:
                    ledger.mark_uncertain(rid)
            assert ledger.usage(["c"]).used == sum(held.values(), D(0))
            assert ledger.usage().used == ledger.usage(["c"]).used
        assert format_money(ledger.usage().limit) == "12.00"


_AWKWARD_NAMES = ["a#b", "what?x=1", "100%", "100%25", "with space", "données", "#?% é ü"]


@pytest.mark.parametrize("name", [*_AWKWARD_NAMES, os.fsdecode(b"bytes-\xff-not-utf8")])
async def test_both_stores_open_in_directories_with_uri_syntax_in_their_names(
    tmp_path: Path, name: str
) -> None:
    # Measured before: the ledger failed with "no such table: meta" under
    # `#`, and `?` left a stray file in the parent directory.
    from sluicegate import serve
    from sluicegate.service import Journal

    folder = tmp_path / name
    folder.mkdir()
    ledger = Ledger.create(folder / "ledger.db", D("10"))
    ledger.open_scope(["camp"], D("4"))
    rid = Ledger(folder / "ledger.db").reserve(["camp"], D("1"))
    ledger.settle(rid, D("0.5"))
    assert Ledger(folder / "ledger.db").usage(["camp"]).settled == D("0.5")

    async def run(item: int) -> int:
        return item

    report = await serve(
        range(3), run, window=2, key=str, journal=folder / "journal.db", signals=()
    )
    assert report.ok == 3
    assert Journal(folder / "journal.db").counts() == {"ok": 3, "error": 0}
    assert sorted(os.listdir(tmp_path)) == [name]
    # A reader of a WAL database may leave its -wal and -shm files; nothing else.
    stores = {entry.split("-")[0] for entry in os.listdir(folder)}
    assert stores == {"journal.db", "ledger.db"}
