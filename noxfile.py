"""Developer sessions: ``nox -s tests lint typecheck docs bench``.

``nox`` alone runs the four gates CI runs (everything but ``bench``); see
CONTRIBUTING.md. Floors (coverage, typed API) are judged by ``.ci/floors.py``,
the same script ``.ci/run`` calls.
"""

import os

import nox

nox.options.sessions = ["tests", "lint", "typecheck", "docs"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite under coverage (subprocesses included), held to 95% lines / 90% branches.

    ``nox -s tests -- -k runner`` passes arguments to pytest; the floors are
    only judged on a full run.
    """
    session.install("-e", ".[test]")
    env = {"SLUICEGATE_HYPOTHESIS_PROFILE": os.environ.get("SLUICEGATE_HYPOTHESIS_PROFILE", "ci")}
    session.run("coverage", "erase")
    session.run("coverage", "run", "-m", "pytest", *session.posargs, env=env)
    session.run("coverage", "combine", "--quiet")
    if not session.posargs:
        session.run("python", ".ci/floors.py", "coverage")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on src and tests, and pyright --verifytypes (95% floor)."""
    # The tests import Hypothesis, pytest and the optional engines: the test
    # extra brings them, the dev extra mypy and pyright.
    session.install("-e", ".[test,dev]")
    session.run("mypy", "--strict", "src", "tests")
    session.run("python", ".ci/floors.py", "types")


@nox.session
def docs(session: nox.Session) -> None:
    """mkdocs build --strict: a warning fails it."""
    session.install("-e", ".[docs]")
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        session.create_tmp() + "/site",
        env={"NO_MKDOCS_2_WARNING": "1"},
    )


BENCHES = ("run", "service", "queues", "hosts", "trace", "dask", "imports", "kit", "aio", "report")


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark against its peers, printed as ratios (not a gate).

    ``nox -s bench`` runs them all (``nox -s bench -- --quick``: each smoke-sized);
    ``nox -s bench -- service --quick`` one, with its own arguments. Every
    bench takes ``--quick`` (tests/test_documented_commands.py holds them to it).
    """
    # test: bench/trace.py writes the report's run with the tests' own writer;
    # redis, postgres: the clients bench/queues.py and bench/hosts.py drive.
    session.install("-e", ".[bench,dask,test,redis,postgres]")
    names, args = list(BENCHES), list(session.posargs)
    if args and args[0] in BENCHES:
        names, args = [args[0]], args[1:]
    for name in names:
        session.run("python", f"bench/{name}.py", *args)
