"""Developer sessions: ``nox -s tests lint typecheck docs bench``."""

import nox

nox.options.sessions = ["tests", "lint", "typecheck", "docs"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    # sluicegate.testing builds on Hypothesis, which the test extra brings.
    session.install("-e", ".[test]", "mypy")
    session.run("mypy", "--strict", "src")


@nox.session
def docs(session: nox.Session) -> None:
    session.install("-e", ".[docs]")
    session.run("mkdocs", "build", "--strict", "--site-dir", session.create_tmp() + "/site")


@nox.session
def bench(session: nox.Session) -> None:
    session.install("-e", ".[bench]")
    session.run("python", "bench/run.py", *session.posargs)
