"""Every public name of the companion under the project's fuzzer (tables: ``bad_inputs/`` here).

Each test replaces one argument of one public name by every bad value of its kind and requires a
TypeError or ValueError of the form ``"<argument>: expected <what>, got <type> <value>"``.
"""

import inspect
import pkgutil
from importlib import import_module

import pytest
from helpers.badinput import CLEAN, exemptions, load_tables, outcome

import companion

TABLES = load_tables()
EXEMPT = exemptions()


def public_names(module_name: str) -> set[str]:
    """``__all__``, or else every name the module defines without a leading underscore."""
    module = import_module(f"companion.{module_name}")
    if hasattr(module, "__all__"):
        return set(module.__all__)
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    }


def takes_arguments(value) -> bool:
    try:
        return callable(value) and bool(inspect.signature(value).parameters)
    except (TypeError, ValueError):
        return True


MODULES = sorted(
    info.name for info in pkgutil.iter_modules(companion.__path__) if not info.name.startswith("_")
)


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_name_has_a_bad_input_table(module_name):
    module = import_module(f"companion.{module_name}")
    covered = {case.name.split(".")[0] for case in TABLES.get(module_name, [])}
    exempt = EXEMPT.get(module_name, {})
    missing = sorted(
        name
        for name in public_names(module_name) - covered - set(exempt)
        if takes_arguments(getattr(module, name))
    )
    assert not missing, f"companion.{module_name}: no bad-input case for {missing}"
    for name, reason in exempt.items():
        assert name in public_names(module_name) and reason, (module_name, name)


CALLS = [
    pytest.param(case, argument, id=f"{module}.{case.name}.{argument}")
    for module, cases in sorted(TABLES.items())
    for case in cases
    for argument in case.kinds
]


@pytest.mark.parametrize("case, argument", CALLS)
def test_bad_values_get_the_projects_error(case, argument):
    failures = []
    for value in case.kinds[argument].bad_values():
        result, detail = outcome(case, argument, value)
        if result != CLEAN:
            failures.append(f"{argument}={value!r:.60}: {result}: {detail}")
    assert not failures, "\n".join(failures)
