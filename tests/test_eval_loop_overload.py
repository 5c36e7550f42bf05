"""``sluicegate eval --loop asyncio -c auto`` finds the capacity of an asyncio-only upstream.

A real aiohttp server (tests/upstream_429.py) serves up to C requests at once
and answers 429 above; the environment (tests/eval_envs/overloaded.py)
calls it with aiohttp, an asyncio-only client. This runs for real seconds on
purpose, as tests/test_adaptive_http.py does: the window learns from real
429s. ``python bench/aio.py`` measures the same for larger capacities.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluicegate.cli import main
from upstream_429 import running_overloaded

ENV = Path(__file__).parent / "eval_envs" / "overloaded.py"
CAPACITY = 4


def test_auto_completes_every_rollout_and_settles_within_twice_the_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    with running_overloaded(CAPACITY) as (url, upstream):
        monkeypatch.setenv("EVAL_UPSTREAM", url)
        status = main([
            "eval", f"{ENV}:env", "--loop", "asyncio", "-c", "auto", "--retries", "50",
            "-o", str(out), "--display", "none",
        ])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 200
    assert {row["status"] for row in rows} == {"ok"}
    assert sorted(int(row["task_id"]) for row in rows) == list(range(1, 201))
    record = json.loads((out / "run.json").read_text())
    assert record["config"]["loop"] == "asyncio"
    assert record["scores"] == {"score": 1.0}
    # The upstream refused, the window heard of it, and it settled.
    assert upstream.refused > 0
    assert upstream.peak == CAPACITY
    changes = record["window"]
    assert any(change["reason"] == "overload" for change in changes)
    assert 1 <= changes[-1]["size"] <= 2 * CAPACITY
