"""``sluicegate plot``: a real image of a run's timeline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from observe_runs import png_size, write_eval_run
from sluicegate.cli import main
from sluicegate.report import PlotUnavailable, plot


def colours(path: Path) -> set[tuple[int, int, int]]:
    import matplotlib.image

    pixels = matplotlib.image.imread(path)
    return {
        (round(r * 255), round(g * 255), round(b * 255))
        for row in pixels[::4]
        for r, g, b, *_ in row[::4]
    }


OK_GREEN = (0x3A, 0x92, 0x3A)
ERROR_RED = (0xD6, 0x27, 0x28)


def test_plot_of_an_eval_run_directory(tmp_path: Path) -> None:
    write_eval_run(tmp_path / "run", 300)
    written = plot(tmp_path / "run", tmp_path / "timeline.png")
    assert written == tmp_path / "timeline.png"
    width, height = png_size(written)
    # Timeline and score histogram side by side: a wide image.
    assert 1100 <= width <= 1600 and 500 <= height <= 700
    assert 30_000 < written.stat().st_size < 1_000_000
    seen = colours(written)
    assert OK_GREEN in seen and ERROR_RED in seen


def test_plot_of_a_trace_file_has_no_score_panel(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 50, error_every=0)
    written = plot(tmp_path / "trace.json", tmp_path / "t.png")
    width, _ = png_size(written)
    assert 900 <= width < 1200
    seen = colours(written)
    assert OK_GREEN in seen and ERROR_RED not in seen


def test_plot_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_eval_run(tmp_path, 20)
    assert main(["plot", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'timeline.png'}"
    png_size(tmp_path / "timeline.png")
    assert main(["plot", str(tmp_path / "trace.jsonl"), "-o", str(tmp_path / "t.svg")]) == 0
    assert (tmp_path / "t.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")


def test_plot_of_a_run_without_a_trace_draws_what_results_jsonl_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import matplotlib

    write_eval_run(tmp_path, 40, trace=False)
    # Each rollout from its start for its duration: these overlap in twos.
    path = tmp_path / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for number, row in enumerate(rows):
        row["started_at"] = f"2024-05-01T00:00:{number // 2:02d}+00:00"
        row["duration_s"] = 1.5
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["plot", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out == (
        f"wrote {tmp_path / 'timeline.png'}\n"
        "no trace: drawn from results.jsonl; --trace adds the window's slots, "
        "the drain and failure marks and the window size\n"
    )
    width, _ = png_size(tmp_path / "timeline.png")
    assert width > 1100  # the scores beside it
    seen = colours(tmp_path / "timeline.png")
    assert OK_GREEN in seen and ERROR_RED in seen
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        assert main(["plot", str(tmp_path), "-o", str(tmp_path / "t.svg")]) == 0
    drawn = (tmp_path / "t.svg").read_text(encoding="utf-8")
    # Lanes, not slots: a start every second, each lasting 1.5 s, two at a time: 4 lanes.
    assert "lane 3" in drawn and "lane 4" not in drawn and "slot 0" not in drawn
    assert "--trace adds the window" in drawn


def test_plot_of_nothing_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plot", str(tmp_path)]) == 2
    assert "holds no trace.json or trace.jsonl" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "nope.json")]) == 2
    assert "nope.json: No such file or directory" in capsys.readouterr().err
    assert not (tmp_path / "timeline.png").exists()


def test_plot_without_matplotlib_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_eval_run(tmp_path, 5)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotUnavailable, match=r"sluicegate\[plot\]"):
        plot(tmp_path, tmp_path / "t.png")
    assert main(["plot", str(tmp_path)]) == 2
    assert "pip install 'sluicegate[plot]'" in capsys.readouterr().err


def test_plot_command_names_the_file_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_eval_run(tmp_path / "run", 20)
    (tmp_path / "pictures").mkdir()
    for given, written in [
        ("noext", "noext.png"),
        ("pictures", "pictures/timeline.png"),
        ("out.svg", "out.svg"),
    ]:
        assert main(["plot", str(tmp_path / "run"), "-o", str(tmp_path / given)]) == 0
        assert capsys.readouterr().out == f"wrote {tmp_path / written}\n"
        assert (tmp_path / written).is_file()
    assert not (tmp_path / "noext").exists()


def test_dollar_signs_in_names_are_text_not_tex(tmp_path: Path) -> None:
    import json

    import matplotlib

    write_eval_run(tmp_path, 20, error_every=0, environment="regex $^ vs ^$")
    path = tmp_path / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for number, row in enumerate(rows):
        row["score"] = {"sums of $2+$3": number / 20, "plain": 1.0}
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    # Text kept as text in the SVG, so that the test can read it.
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        assert main(["plot", str(tmp_path), "-o", str(tmp_path / "t.svg")]) == 0
    drawn = (tmp_path / "t.svg").read_text(encoding="utf-8")
    assert "regex $^ vs ^$" in drawn
    assert "sums of $2+$3" in drawn


def test_the_title_says_when_a_session_left_no_timeline(tmp_path: Path) -> None:
    import json

    import matplotlib

    write_eval_run(tmp_path, 10)
    record = json.loads((tmp_path / "run.json").read_text())
    record["sessions"] = [{}, {}]  # resumed once, without --trace
    (tmp_path / "run.json").write_text(json.dumps(record))
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        assert main(["plot", str(tmp_path), "-o", str(tmp_path / "t.svg")]) == 0
    drawn = (tmp_path / "t.svg").read_text(encoding="utf-8")
    assert "timeline of 1 of 2 sessions (the traced ones)" in drawn
