"""The public API is what ``__all__`` says, and each name says where it lives.

The packages are found, not listed: the root and every subpackage without a
leading underscore (``sluicegate.eval``, ``sluicegate.campaign``, ...), so a
new one is checked as soon as it exists.
"""

from __future__ import annotations

import decimal
import importlib
import importlib.metadata
import pathlib
import pkgutil
import subprocess
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Set
from typing import Any

import attrs
import pytest

import sluicegate
from sluicegate import _util


def public_packages() -> list[str]:
    found = [sluicegate.__name__]
    for module in pkgutil.iter_modules(sluicegate.__path__, prefix="sluicegate."):
        if module.ispkg and not module.name.rpartition(".")[2].startswith("_"):
            found.append(module.name)
    return found


PACKAGES = public_packages()

# Gaps in other parts of the package, each to be closed where it lives (none
# today). The marks are strict: once a gap is closed its test passes,
# xfail_strict turns that into a failure, and the entry must go.
NO_FIXUP_YET: set[str] = set()  # packages with no fixup_module_metadata call in __init__
NOT_FINAL_YET: set[str] = set()


def exported(package: str) -> list[str]:
    return list(getattr(importlib.import_module(package), "__all__", []))


def public_objects(
    gaps: Set[str] = frozenset(), reason: str = "", *, kind: Callable[[object], bool]
) -> list[Any]:
    """(package, name) for each public name of ``kind``; ``gaps`` (packages or names) are xfail."""
    params = []
    for package in PACKAGES:
        for name in exported(package):
            if not kind(getattr(importlib.import_module(package), name)):
                continue
            where = f"{package}.{name}"
            marks = [pytest.mark.xfail(reason=reason)] if {package, where} & gaps else []
            params.append(pytest.param(package, name, id=where, marks=marks))
    return params


def test_the_known_subpackages_are_found() -> None:
    assert {"sluicegate.campaign", "sluicegate.eval", "sluicegate.testing"} <= set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_public_names_are_what_all_says(package: str) -> None:
    module = importlib.import_module(package)
    names = getattr(module, "__all__", [])
    assert isinstance(names, list)
    assert len(set(names)) == len(names), "a name listed twice"
    assert all(hasattr(module, name) for name in names)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        # Subpackages and `from __future__ import annotations` are not exports.
        and not isinstance(value, types.ModuleType)
        and type(value).__module__ != "__future__"
    }
    assert public == set(names)


def is_class_or_function(obj: object) -> bool:
    return isinstance(obj, type | types.FunctionType)


def is_value_class(obj: object) -> bool:
    return isinstance(obj, type) and attrs.has(obj) and not issubclass(obj, BaseException)


def is_class(obj: object) -> bool:
    return isinstance(obj, type)


@pytest.mark.parametrize(
    ("package", "name"), public_objects(NO_FIXUP_YET, "no fix-up yet", kind=is_class_or_function)
)
def test_each_name_reports_its_public_home(package: str, name: str) -> None:
    obj = getattr(importlib.import_module(package), name)
    home = obj.__module__
    # Its own package, or a public package that exports it too (the root
    # re-exports some names of its subpackages).
    assert home in PACKAGES, f"{package}.{name} says it lives in {home}"
    assert getattr(sys.modules[home], name) is obj
    assert name in exported(home)
    assert (obj.__name__, obj.__qualname__) == (name, name)
    if isinstance(obj, type):
        for attr_name, member in vars(obj).items():
            if isinstance(member, types.FunctionType | type) and member.__qualname__.startswith(
                f"{name}."
            ):
                assert member.__module__ == home, f"{name}.{attr_name}"


@pytest.mark.parametrize(
    ("package", "name"), public_objects(NOT_FINAL_YET, "not final yet", kind=is_value_class)
)
def test_value_classes_are_final(package: str, name: str) -> None:
    obj = getattr(importlib.import_module(package), name)
    assert getattr(obj, "__final__", False), f"{package}.{name} is not @typing.final"


@pytest.mark.parametrize(
    ("package", "name"), public_objects(NO_FIXUP_YET, "no fix-up yet", kind=is_class)
)
def test_classes_resolve_their_annotations(package: str, name: str) -> None:
    # typing.get_type_hints, and so cattrs, looks string annotations up in the
    # module that __module__ names, which is now the package: the fix-up
    # resolves them against the defining module first.
    obj = getattr(importlib.import_module(package), name)
    assert isinstance(obj, type)
    typing.get_type_hints(obj)
    if attrs.has(obj):
        assert [field.name for field in attrs.fields(obj) if isinstance(field.type, str)] == []


def test_the_fixup_renames_only_what_a_private_module_of_the_package_defined() -> None:
    private = types.ModuleType("pkg._things")
    exec(
        textwrap.dedent(
            """
            from __future__ import annotations
            from decimal import Decimal
            from typing import TYPE_CHECKING
            import attrs
            if TYPE_CHECKING:
                from somewhere import Missing

            @attrs.frozen
            class Price:
                amount: Decimal
                def doubled(self) -> Price:
                    return Price(self.amount * 2)

            class Odd:
                later: Missing

            def helper() -> None: ...
            """
        ),
        vars(private),
    )
    sys.modules[private.__name__] = private
    try:
        namespace: dict[str, object] = {
            "Price": private.Price,
            "Odd": private.Odd,
            "cost": private.helper,
            "Path": pathlib.Path,
            "__all__": ["Price", "Odd", "cost", "Path"],
        }
        _util.fixup_module_metadata("pkg", namespace)
    finally:
        del sys.modules[private.__name__]
    assert private.Price.__module__ == "pkg"
    assert private.Price.doubled.__module__ == "pkg"
    assert private.Price.doubled.__qualname__ == "Price.doubled"
    assert attrs.fields(private.Price).amount.type is decimal.Decimal
    assert typing.get_type_hints(private.Price) == {"amount": decimal.Decimal}
    # An annotation nothing can resolve stays as it was; the name still moves.
    assert private.Odd.__annotations__ == {"later": "Missing"}
    assert private.Odd.__module__ == "pkg"
    # Exported under another name: it takes that name.
    assert (private.helper.__name__, private.helper.__qualname__) == ("cost", "cost")
    # Not defined in the package: untouched.
    assert pathlib.Path.__module__ == "pathlib"


def test_the_version_is_the_same_everywhere() -> None:
    assert importlib.metadata.version("sluicegate") == sluicegate.__version__
    done = subprocess.run(
        [sys.executable, "-m", "sluicegate", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout == f"sluicegate {sluicegate.__version__}\n"
