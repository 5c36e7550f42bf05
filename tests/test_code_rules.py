"""The repository's own rules, read from the source: what ruff, mypy and lint-imports cannot see.

* a test imports a private module only where :data:`PRIVATE_IMPORTS` allows it;
* no module imports a private name from another package;
* no test patches a private name;
* each subpackage's errors share a base, drawn as a tree in its ``__init__`` docstring;
* CONTRIBUTING.md says what ``pyproject.toml``, ``noxfile.py`` and ``.ci/run`` do.

Each rule is also fed a snippet that breaks it, so that it is known to fail.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import pkgutil
import re
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sluicegate

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
SOURCE = Path(sluicegate.__file__).resolve().parent
THIS = "tests/test_code_rules.py"

# -- private modules in tests -----------------------------------------------------------

# Test files (relative to tests/) that may import private modules, each with
# the modules it may import and why the public API does not do. Keep it
# short: an entry goes as soon as its test can use public names. The rule
# reads imports in string scripts that tests run as child processes too.
PRIVATE_IMPORTS: dict[str, tuple[set[str], str]] = {
    "observe_runs.py": ({"sluicegate._trace"}, "records runs with recording(), as eval does"),
    "test_adaptive.py": (
        {"sluicegate._retry"},
        "drives attempt(), the retry loop, a run at a time",
    ),
    "test_adaptive_http.py": ({"sluicegate._retry"}, "attempt() against a real HTTP upstream"),
    "upstream.py": ({"sluicegate._retry"}, "drives attempt(), the retry loop, as serve() does"),
    "test_argument_checks.py": ({"sluicegate._checks"}, "the shared argument checks themselves"),
    "test_campaign.py": (
        {
            "sluicegate.campaign._freeze",
            "sluicegate.campaign._launch",
            "sluicegate.campaign._outdir",
        },
        "the job-function check, and a child's and a directory's lock, seen directly",
    ),
    "test_campaign_admission.py": (
        {
            "sluicegate.campaign._admission",
            "sluicegate.campaign._panel",
            "sluicegate.campaign._state",
        },
        "Admission over a Panel alone, with an in-memory budget",
    ),
    "test_campaign_cli.py": ({"sluicegate.campaign._outdir"}, "DRAIN_POLL_S, quoted by the docs"),
    "test_campaign_launch.py": (
        {"sluicegate.campaign._job", "sluicegate.campaign._launch", "sluicegate.campaign._outdir"},
        "launching, adopting and stopping one child, without a controller",
    ),
    "test_campaign_plan.py": ({"sluicegate.campaign._convert"}, "dump_json, to round-trip a plan"),
    "test_campaign_resume.py": (
        {"sluicegate.campaign._launch", "sluicegate.campaign._view"},
        "child_alive() and spawn_process for the _spawn seam; PlainView's lines",
    ),
    "test_campaign_settle.py": (
        {"sluicegate.campaign._job", "sluicegate.campaign._settle"},
        "Accounts (settlement) alone, against a real ledger",
    ),
    "test_checks.py": (
        {"sluicegate.testing._trace"},
        "EventKind, to build traces that break rules",
    ),
    "test_dask_bridge.py": (
        {"sluicegate.dask._bridge"},
        "the engine-neutral Bridge on a fake engine",
    ),
    "test_demo.py": ({"sluicegate._demo"}, "run_demo, the body of `sluicegate demo`"),
    "test_eval.py": (
        {
            "sluicegate.eval._cli",
            "sluicegate.eval._config",
            "sluicegate.eval._format",
            "sluicegate.eval._slots",
            "sluicegate.eval._target",
        },
        "the command's parser, its refusals and warnings, and the results reader",
    ),
    "test_eval_dask.py": (
        {"sluicegate.eval._dask", "sluicegate.eval._slots"},
        "what crosses to a Dask worker (RemoteAttempt, Slot, unpack)",
    ),
    "test_eval_display.py": ({"sluicegate._terminal"}, "messages(), the commands' stderr lines"),
    "test_eval_properties.py": ({"sluicegate.eval._slots"}, "IdBook's id rules as properties"),
    "test_eval_refusals.py": (
        {"sluicegate.eval._config"},
        "UsageError, the usage refusal (exit 2)",
    ),
    "test_eval_rollouts.py": ({"sluicegate.eval._slots"}, "TaskCapWarning, for tasks beyond -n"),
    "test_eval_runs.py": (
        {"sluicegate.eval._log"},
        "holds a run's SessionLock, as a live session does, without running one",
    ),
    "test_eval_samples.py": (
        {
            "sluicegate._values",
            "sluicegate.eval._format",
            "sluicegate.eval._records",
            "sluicegate.report._run",
        },
        "the value encoder's caps, and the readers of the rows it wrote",
    ),
    "test_public_api.py": ({"sluicegate._util"}, "fixup_module_metadata, whose effect it checks"),
    "test_report_edges.py": (
        {"sluicegate._trace", "sluicegate.report._svg"},
        "recording() and a trace's file names; the timeline drawing alone",
    ),
    "test_retry.py": ({"sluicegate._retry"}, "attempt() and CutShort, the loop under Retry"),
    "test_retry_waits.py": ({"sluicegate._retry"}, "attempt()'s waits under MockClock"),
    "test_runner.py": (
        {"sluicegate._runner"},
        "run_each (serve's way into the runner) and CURRENT_INDEX (what serve reads)",
    ),
    "test_serve_stats.py": ({"sluicegate.service._stats"}, "the counters behind ServeStats"),
    "test_stats.py": (
        {"sluicegate.eval._reduce", "sluicegate.eval._stats"},
        "statistics and reducers against values computed by hand",
    ),
    "test_trace.py": ({"sluicegate._trace"}, "the recorder, its event log and the Chrome writer"),
    "test_trace_runner.py": ({"sluicegate._trace"}, "recording(), as eval and campaign use it"),
    "test_window.py": (
        {"sluicegate._runner", "sluicegate._window"},
        "run_each and current_window(), a window seen from a run",
    ),
}


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def code_in(source: str) -> Iterator[ast.Module]:
    """``source``'s tree, then the trees of the string scripts in it (run as child processes)."""
    tree = ast.parse(source)
    yield tree
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "sluicegate" in node.value
            and "import" in node.value
        ):
            try:
                yield ast.parse(node.value)
            except SyntaxError:
                continue


def private_imports(source: str) -> dict[str, int]:
    """The private sluicegate modules (or names) ``source`` imports, each with a line."""
    found: dict[str, int] = {}
    for tree in code_in(source):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] != "sluicegate":
                    continue
                for i, part in enumerate(parts):
                    if is_private(part):
                        found.setdefault(".".join(parts[: i + 1]), node.lineno)
                        break
    return found


def test_private_imports_are_found_in_code_and_in_child_scripts() -> None:
    source = (
        "import sluicegate._util\n"
        "from sluicegate.eval._slots import Slot\n"
        "from sluicegate.campaign import _scheduler, run_campaign\n"
        "from sluicegate.eval import evaluate\n"
        'SCRIPT = """\nfrom sluicegate._trace import recording\n"""\n'
    )
    assert private_imports(source) == {
        "sluicegate._util": 1,
        "sluicegate.eval._slots": 2,
        "sluicegate.campaign._scheduler": 3,
        "sluicegate._trace": 2,  # line 2 of its script
    }


def files_of_tests() -> list[Path]:
    # This file's snippets break the rules on purpose, to show that they are seen.
    return sorted(p for p in TESTS.rglob("*.py") if p != TESTS / "test_code_rules.py")


def test_no_test_imports_a_private_module_it_is_not_allowed() -> None:
    problems = []
    for path in files_of_tests():
        name = path.relative_to(TESTS).as_posix()
        allowed, _ = PRIVATE_IMPORTS.get(name, (set(), ""))
        for module, line in sorted(private_imports(path.read_text(encoding="utf-8")).items()):
            if module not in allowed:
                problems.append(f"tests/{name}:{line} imports {module}")
    assert not problems, (
        "\n".join(problems) + "\n\nTests use the public API: import each name from its package "
        "(sluicegate, sluicegate.eval, ...) where it is exported, or test the behaviour through "
        "a public entry point. If the test must reach inside (it tests one internal piece "
        f"alone), allow it in {THIS}, PRIVATE_IMPORTS, with a one-line reason:\n"
        '    "test_x.py": ({"sluicegate.eval._x"}, "why the public API does not do"),\n'
        "(add the module to the file's set if it has an entry already)."
    )


def test_the_private_import_allowlist_has_nothing_stale() -> None:
    stale = []
    for name, (allowed, reason) in sorted(PRIVATE_IMPORTS.items()):
        path = TESTS / name
        imported = private_imports(path.read_text(encoding="utf-8")) if path.exists() else {}
        stale += [f"tests/{name}: {module}" for module in sorted(allowed - set(imported))]
        if not reason or "\n" in reason:
            stale.append(f"tests/{name}: give a one-line reason")
    assert not stale, (
        "\n".join(stale) + f"\n\nThese tests no longer import these private modules: remove "
        f"them from PRIVATE_IMPORTS in {THIS} (and an entry left with no module)."
    )


# -- private names across packages -------------------------------------------------------

# Known violations, to be fixed elsewhere: (importing file, module, name).
# TEMPORARY: service/_serve.py imports the runner's _check_arguments until the
# runner makes it public (issue 27, on another branch). The lead empties this
# set when that lands; nothing may be added to it.
CROSS_PACKAGE_PRIVATE_NAMES_TO_FIX: set[tuple[str, str, str]] = set()


def package_of(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1]  # an __init__'s package is its directory too


def cross_package_private_names(path: Path, root: Path) -> list[tuple[int, str, str]]:
    """``(line, module, name)`` of each private name ``path`` takes from another package.

    ``root`` holds the top-level package. A private *module* (``from .. import
    _util``) is fine; its private names used as ``_util._name`` are not.
    """
    package = package_of(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    modules: dict[str, list[str]] = {}  # local name -> a private module of another package
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            target = package[: len(package) - node.level + 1] + (node.module or "").split(".")
            target = [t for t in target if t]
        else:
            target = (node.module or "").split(".")
        if target[0] != package[0]:
            continue
        where = root.joinpath(*target)
        target_package = target if where.is_dir() else target[:-1]
        for alias in node.names:
            if not is_private(alias.name):
                continue
            if (where / f"{alias.name}.py").exists() or (where / alias.name).is_dir():
                if target != package:
                    modules[alias.asname or alias.name] = [*target, alias.name]
            elif target_package != package:
                found.append((node.lineno, ".".join(target), alias.name))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and is_private(node.attr)
        ):
            found.append((node.lineno, ".".join(modules[node.value.id]), node.attr))
    return found


def test_a_private_name_across_packages_is_found(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "_core.py").write_text("_hook = 1\n")
    (tmp_path / "pkg" / "sub" / "_own.py").write_text("_mine = 1\n")
    user = tmp_path / "pkg" / "sub" / "_user.py"
    user.write_text(
        "from .. import _core\n"  # a private module: fine
        "from .._core import _hook\n"  # a private name of another package
        "from ._own import _mine\n"  # a private name of its own package: fine
        "x = _core._hook\n"
    )
    assert cross_package_private_names(user, tmp_path) == [
        (2, "pkg._core", "_hook"),
        (4, "pkg._core", "_hook"),
    ]


def test_no_module_imports_a_private_name_of_another_package() -> None:
    found = set()
    for path in sorted(SOURCE.rglob("*.py")):
        name = path.relative_to(SOURCE.parent).as_posix()
        for line, module, private in cross_package_private_names(path, SOURCE.parent):
            found.add((name, module, private, line))
    new = sorted(f for f in found if f[:3] not in CROSS_PACKAGE_PRIVATE_NAMES_TO_FIX)
    assert not new, (
        "\n".join(
            f"src/{f}:{line} takes {private} from {module}" for f, module, private, line in new
        )
        + "\n\nA package uses only what another package makes public. Make the name public "
        "there (no underscore, in its module's __all__, documented), or ask for what you need "
        "through a public protocol member; a private module (`from .. import _util`) is fine."
    )
    fixed = CROSS_PACKAGE_PRIVATE_NAMES_TO_FIX - {f[:3] for f in found}
    assert not fixed, (
        f"fixed: {sorted(fixed)}; remove them from CROSS_PACKAGE_PRIVATE_NAMES_TO_FIX in {THIS}"
    )


# -- no test patches a private name --------------------------------------------------------


def private_patches(source: str) -> list[int]:
    """The lines of ``source`` (or of its child scripts) that patch a private name."""
    lines = []
    for tree in code_in(source):
        private_modules = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if is_private(alias.name)
        }
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if not isinstance(target, ast.Attribute):
                    continue
                owner = target.value
                on_self = isinstance(owner, ast.Name) and owner.id in ("self", "cls")
                on_private_module = isinstance(owner, ast.Name) and owner.id in private_modules
                if (is_private(target.attr) and not on_self) or on_private_module:
                    lines.append(target.lineno)
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called not in ("setattr", "delattr", "patch", "object"):
                    continue
                first = node.args[0]
                second = node.args[1] if len(node.args) > 1 else None
                if (
                    (isinstance(first, ast.Name) and first.id in private_modules)
                    or (
                        isinstance(first, ast.Constant)
                        and isinstance(first.value, str)
                        and any(is_private(p) for p in first.value.split("."))
                    )
                    or (
                        isinstance(second, ast.Constant)
                        and isinstance(second.value, str)
                        and is_private(second.value)
                    )
                ):
                    lines.append(node.lineno)
    return lines


def test_private_patches_are_found() -> None:
    # The snippet is put together from parts, so that no line of this file
    # reads as a patch to a tool that checks the tests line by line.
    assigned = ["_outdir.freeze", "admission._reserve", "self._state"]  # the last is fine
    patched = ["_outdir, 'freeze'", "thing, '_x'", "'sluicegate._runner.run_each'", "os, 'sep'"]
    source = "from sluicegate.campaign import _outdir\n"
    source += "".join(f"{target} = None\n" for target in assigned)
    source += "".join(f"monkeypatch.setattr({arguments}, None)\n" for arguments in patched)
    assert private_patches(source) == [2, 3, 5, 6, 7]


def test_no_test_patches_a_private_name() -> None:
    found = [
        f"tests/{path.relative_to(TESTS).as_posix()}:{line}"
        for path in files_of_tests()
        for line in private_patches(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "\n".join(found) + "\n\nNo test patches a private name (a private module's attribute, "
        "an object's _field, monkeypatch.setattr of either). Assert what the code does from "
        "outside, or give the code a seam: a keyword argument, documented where it is taken, "
        "as run_campaign's _spawn and _step are."
    )


# -- each subpackage's exception tree ------------------------------------------------------


def subpackages() -> list[str]:
    return [
        module.name
        for module in pkgutil.iter_modules(sluicegate.__path__, prefix="sluicegate.")
        if module.ispkg and not is_private(module.name.rpartition(".")[2])
    ]


def is_error(value: object) -> bool:
    return (
        isinstance(value, type)
        and issubclass(value, BaseException)
        and not issubclass(value, Warning)
    )


def defined_errors(package: types.ModuleType) -> dict[str, type[BaseException]]:
    """Every error class with a public name that ``package``'s modules define."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.iter_modules(package.__path__, prefix=package.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                is_error(value)
                and not is_private(name)
                and value.__name__ == name
                and value.__module__ in (module.__name__, package.__name__)
            ):
                found[name] = value
    return found


TREE_FORMAT = """Draw the package's errors in its __init__ docstring, as a fenced block:

```text
PackageError          never raised itself
├── OneError          what it means
└── OtherError        what it means (also ValueError)
    └── NarrowerError what it means
```

(the base on the first line, each class under its parent, "(also X)" naming any
builtin error a class is besides the base)."""


def drawn_tree(doc: str) -> list[tuple[int, str, str]]:
    """``(depth, class name, description)`` per line of the docstring's fenced ```text block."""
    match = re.search(r"^```text\n(.*?)^```", doc, re.M | re.S)
    if match is None:
        return []
    lines = []
    for line in match.group(1).splitlines():
        if not line.strip():
            continue
        drawn = re.match(r"^([│├└─ ]*)(\w+)\s*(.*)$", line)
        assert drawn, f"not a line of an exception tree: {line!r}\n{TREE_FORMAT}"
        lines.append((len(drawn.group(1)) // 4, drawn.group(2), drawn.group(3)))
    return lines


def also(cls: type[BaseException], base: type[BaseException]) -> set[str]:
    """The builtin errors ``cls`` is besides ``base``, most specific only (``ValueError``)."""
    kinds = [
        k
        for k in cls.__mro__
        if k.__module__ == "builtins" and k not in base.__mro__ and hasattr(builtins, k.__name__)
    ]
    return {k.__name__ for k in kinds if not any(o is not k and issubclass(o, k) for o in kinds)}


@pytest.mark.parametrize("name", subpackages())
def test_a_subpackage_s_errors_share_a_base_drawn_in_its_docstring(name: str) -> None:
    package = importlib.import_module(name)
    exported = {n: getattr(package, n) for n in package.__all__ if is_error(getattr(package, n))}
    defined = defined_errors(package)
    tree = drawn_tree(package.__doc__ or "")
    if not exported and not defined:
        assert not tree, f"{name} has no errors, but its docstring draws some"
        return
    assert tree, f"{name} has errors ({', '.join(sorted(defined))}) and no tree.\n{TREE_FORMAT}"
    known = {**defined, **exported}
    depth, base_name, _ = tree[0]
    assert depth == 0 and base_name in exported, (
        f"{name}: the tree's first line is {base_name}: it must be the package's base error, "
        f"exported in __all__.\n{TREE_FORMAT}"
    )
    base = known[base_name]
    parents: list[type[BaseException]] = []
    for depth, drawn, text in tree:
        assert drawn in known, f"{name}'s tree draws {drawn}, which is not one of its errors"
        assert 0 < depth <= len(parents) or not parents, (
            f"{name}'s tree draws {drawn} at depth {depth}: one base on the first line, and "
            f"each class one level under its parent.\n{TREE_FORMAT}"
        )
        cls = known[drawn]
        del parents[depth:]
        if parents:
            assert issubclass(cls, parents[-1]), (
                f"{name}'s tree draws {drawn} under {parents[-1].__name__}, "
                f"but it is not a subclass: fix the tree or the class"
            )
        stated = set(re.findall(r"\(also ([\w, ]+)\)", text))
        stated = {s.strip() for group in stated for s in group.split(",")}
        assert stated == also(cls, base), (
            f"{name}'s tree says {drawn} is also {sorted(stated) or 'nothing'}; "
            f"it is also {sorted(also(cls, base)) or 'nothing'} besides {base_name}"
        )
        parents.append(cls)
    drawn_names = {drawn for _, drawn, _ in tree}
    undrawn = sorted(set(exported) - drawn_names)
    assert not undrawn, f"{name} exports {undrawn}: draw them in its tree.\n{TREE_FORMAT}"
    orphans = sorted(n for n, cls in defined.items() if not issubclass(cls, base))
    assert not orphans, (
        f"{', '.join(orphans)} of {name} do not derive from {base_name}: add it as a base "
        f"(first, keeping the others: class X({base_name}, ValueError)), and draw them."
    )


def test_a_tree_is_read_by_depth() -> None:
    doc = "Errors:\n\n```text\nA  base\n├── B  one (also ValueError)\n│   └── C  two\n└── D\n```\n"
    assert drawn_tree(doc) == [
        (0, "A", "base"),
        (1, "B", "one (also ValueError)"),
        (2, "C", "two"),
        (1, "D", ""),
    ]


# -- CONTRIBUTING.md against the code ----------------------------------------------------


def contributing_section(title: str) -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"CONTRIBUTING.md has no section '## {title}'"
    return match.group(1)


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def contract_layers() -> list[str]:
    config = pyproject()["tool"]["importlinter"]
    [contract] = [c for c in config["contracts"] if c["type"] == "layers"]
    return [" ".join(layer.split()) for layer in contract["layers"]]


def drawn_layers() -> list[str]:
    """The layer lines of CONTRIBUTING's picture: the unindented lines of its ```text block."""
    match = re.search(r"^```text\n(.*?)^```", contributing_section("Architecture"), re.M | re.S)
    assert match, "CONTRIBUTING.md's Architecture section has no ```text block (the layers)"
    return [" ".join(line.split()) for line in match.group(1).splitlines() if line[:1].strip()]


def test_contributing_draws_the_layers_of_the_contract() -> None:
    contract, drawn = contract_layers(), drawn_layers()
    assert drawn == contract, (
        "CONTRIBUTING.md's layer picture (Architecture) differs from the layers contract in "
        "pyproject.toml ([tool.importlinter]).\n  pyproject.toml:  "
        + "\n                   ".join(contract)
        + "\n  CONTRIBUTING.md: "
        + "\n                   ".join(drawn)
        + "\nUpdate the picture: the same lines, highest first, the same `:` and `|`, each "
        "followed by an indented line or two saying what the layer holds."
    )


def test_contributing_names_the_file_the_version_lives_in() -> None:
    version_file: str = pyproject()["tool"]["hatch"]["version"]["path"]
    assert "__version__ = " in (ROOT / version_file).read_text(encoding="utf-8")
    releasing = contributing_section("Releasing")
    named = set(re.findall(r"`(src/[\w/]+\.py)`", releasing))
    assert named == {version_file}, (
        f"CONTRIBUTING.md's Releasing section names {sorted(named)} for the version; "
        f"it lives in {version_file} ([tool.hatch.version] in pyproject.toml)"
    )
    # The root package takes it from there; no second copy.
    init = ast.parse((SOURCE / "__init__.py").read_text(encoding="utf-8"))
    assigned = [
        node
        for node in ast.walk(init)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
    ]
    assert not assigned, (
        f"src/sluicegate/__init__.py sets __version__; import it from {version_file}"
    )


def nox_sessions() -> tuple[set[str], list[str]]:
    """The sessions noxfile.py defines, and the ones ``nox`` alone runs."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any("nox.session" in ast.unparse(d) for d in node.decorator_list)
    }
    default: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "nox.options.sessions":
            default = ast.literal_eval(node.value)
    return defined, default


def test_contributing_lists_the_gates_ci_and_nox_run() -> None:
    gates = contributing_section("The gates")
    rows = re.findall(r"^\| `nox -s (\w+)` \| (.*?) \|", gates, re.M)
    assert rows, "CONTRIBUTING.md's gates table is gone (| `nox -s NAME` | what it runs | ...)"
    defined, default = nox_sessions()
    sessions = [session for session, _ in rows]
    assert set(sessions) == defined, (
        f"CONTRIBUTING.md's gates table lists the sessions {sorted(sessions)}; "
        f"noxfile.py defines {sorted(defined)}"
    )
    assert "(`nox` alone runs the first four)" in gates and default == sessions[:4], (
        f"`nox` alone runs {default} (noxfile.py's nox.options.sessions); CONTRIBUTING.md "
        f"says the first four of its table, {sessions[:4]}"
    )
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    missing = [
        command
        for session, what in rows
        if session in default
        for command in re.findall(r"`([^`]+)`", what)
        if command not in ci
    ]
    assert not missing, f"CONTRIBUTING.md says CI runs {missing}; .ci/run does not"


def test_contributing_names_only_files_that_exist() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    missing = []
    named = set(re.findall(r"`([\w./]+\.(?:py|toml|md))`", text)) - {"_name.py"}  # a pattern
    for name in sorted(named):
        if "/" in name:
            exists = (ROOT / name).exists()
        else:
            exists = any((where / name).exists() for where in (ROOT, TESTS, ROOT / "docs")) or any(
                SOURCE.rglob(name)
            )
        if not exists:
            missing.append(name)
    assert not missing, f"CONTRIBUTING.md names files that do not exist: {missing}"
