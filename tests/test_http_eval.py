"""examples/http_eval.py against the local model API, through `sluicegate eval -c auto`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from sluicegate.eval import evaluate
from upstream import Upstream, serving

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "http_eval.py"


def environ(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.pop("HTTP_EVAL_BASE_URL", None)
    env.update(extra)
    return env


async def test_eval_c_auto_scores_every_task_and_records_the_window(tmp_path: Path) -> None:
    upstream = Upstream(4, latency=0.05, retry_after=0.1)
    out = tmp_path / "run"
    async with serving(upstream) as url:
        done = await trio.run_process(
            [
                sys.executable,
                "-m",
                "sluicegate",
                "eval",
                f"{EXAMPLE}:env",
                "-n",
                "40",
                "-c",
                "auto:16",
                "--retries",
                "20",
                "-o",
                str(out),
                "--display",
                "none",
            ],
            env=environ(HTTP_EVAL_BASE_URL=url, HTTP_EVAL_MODEL="local"),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    record = json.loads((out / "run.json").read_text())
    assert record["config"]["concurrency"] == "auto:16"
    assert record["counts"]["ok"] == 40
    assert record["scores"]["score"] == 1.0
    sizes = [change["size"] for change in record["window"]]
    assert sizes, "the adaptive window's sizes are in run.json"
    assert all(1 <= size <= 16 for size in sizes)
    assert upstream.peak <= 4


async def test_the_script_runs_against_a_base_url(tmp_path: Path) -> None:
    upstream = Upstream(8, latency=0.02, retry_after=0.1)
    async with serving(upstream) as url:
        done = await trio.run_process(
            [sys.executable, str(EXAMPLE), "--base-url", url, "-n", "12", "-c", "auto"],
            env=environ(HTTP_EVAL_MODEL="local"),
            cwd=tmp_path,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    assert upstream.served >= 12


def test_without_an_address_it_sends_nothing_and_explains() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=environ(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert "--base-url" in done.stdout


@pytest.mark.parametrize("bad", ["auto:0", "auto:x", "automatic", "0"])
async def test_bad_concurrency_is_refused_before_anything_runs(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="auto:MAX"):
        await evaluate(f"{EXAMPLE}:env", concurrency=bad, output_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_a_resume_keeps_the_adaptive_window(tmp_path: Path) -> None:
    out = tmp_path / "run"
    target = f"{ROOT / 'examples' / 'arithmetic.py'}:env"
    base = [sys.executable, "-m", "sluicegate", "eval", "--display", "none"]
    first = subprocess.run(
        [*base, target, "-n", "4", "-c", "auto:16", "-o", str(out)],
        env=environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert first.returncode in (0, 1), first.stderr
    again = subprocess.run(
        [*base, "--resume", str(out)],
        env=environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode in (0, 1), again.stderr
    config = json.loads((out / "run.json").read_text())["config"]
    assert config["concurrency"] == "auto:16"
    assert "adaptive" not in config
