"""``check_roundtrip``: save to ``.keras``, load (in a fresh process or this one), compare.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import pickle
import sys
import tempfile
import textwrap
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np

from companion._checks import (
    check_bool,
    check_instance,
    check_real,
    describe,
    shorten,
)
from companion._text import error_text, keras_message
from companion.diagnostics._configs import (
    config_problems,
    objects_of_custom_classes,
    registration_problems,
)
from companion.diagnostics._inputs import as_arrays, call_on, host_array, subject_of, to_numpy
from companion.notebook import run_python


@dataclass
class RoundtripReport:
    """What ``check_roundtrip`` found.

    Attributes:
        subject: The object checked, e.g. ``"CustomDense 'dense'"``.
        fresh_process: Whether the file was loaded in a fresh Python process.
        problems: One sentence per problem, naming what differs; empty when all is well.
        notes: Warnings Keras gave while saving or loading (not problems by themselves).

    Taught in chapter 4, "Subclassed models record nothing".
    """

    subject: str
    fresh_process: bool
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no problem was found.

        Taught in chapter 4, "Subclassed models record nothing".
        """
        return not self.problems

    def __str__(self) -> str:
        """A line for the verdict, then each problem as a bullet wrapped to 84 columns."""
        where = "a fresh process" if self.fresh_process else "this process"
        verdict = "ok" if self.ok else f"{len(self.problems)} problem(s)"
        return "\n".join(
            [f"{self.subject}, saved and loaded in {where}: {verdict}"]
            + [
                textwrap.fill(problem, 84, initial_indent="  - ", subsequent_indent="    ")
                for problem in self.problems
            ]
        )


def _warning_texts(caught: list[warnings.WarningMessage]) -> list[str]:
    """The messages of Keras's warnings (NumPy's deprecation notices about Keras left out)."""
    return [
        keras_message(str(w.message))
        for w in caught
        if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))
    ]


def _save(obj: Any, path: str, notes: list[str]) -> str | None:
    """Save ``obj`` to ``path``; the error text if that fails. Warnings go to ``notes``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            keras.saving.save_model(obj, path)
        except Exception as error:  # any failure to save is the finding
            return f"saving failed: {error_text(error)}"
        finally:
            notes.extend(_warning_texts(caught))
    return None


def _reloaded_state(path: str, sample_input: Any, modules: list[str]) -> dict[str, Any]:
    """Load ``path`` (after importing ``modules``) and return its config, weights and outputs.

    Runs in this process or, through ``run_python``, in a fresh one; everything it returns is
    plain Python and NumPy, so it can travel back by pickle.
    """
    state: dict[str, Any] = {
        "error": None,
        "config": None,
        "weights": [],
        "output": None,
        "warnings": [],
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for module in modules:
                importlib.import_module(module)
            obj = keras.saving.load_model(path)
            state["config"] = json.loads(json.dumps(keras.saving.serialize_keras_object(obj)))
            state["weights"] = [(v.path, host_array(v)) for v in _state_variables(obj)]
            if sample_input is not None:
                state["output"] = to_numpy(obj(sample_input))
        except Exception as error:  # any failure to import, load or call is the finding
            state["error"] = f"load_model failed: {error_text(error)}"
        state["warnings"] = _warning_texts(caught)
    return state


def _state_variables(obj: Any) -> list[Any]:
    return list(obj.variables if isinstance(obj, keras.optimizers.Optimizer) else obj.weights)


def _reload_in_child(
    path: str, sample_input: Any, modules: list[str], workdir: str, timeout: float
) -> dict:
    request, answer = os.path.join(workdir, "request.pkl"), os.path.join(workdir, "answer.pkl")
    with open(request, "wb") as file:
        pickle.dump({"path": path, "sample_input": sample_input, "modules": modules}, file)
    code = (
        "import pickle\n"
        "from companion.diagnostics._roundtrip import _reloaded_state\n"
        f"with open({request!r}, 'rb') as file:\n    request = pickle.load(file)\n"
        f"with open({answer!r}, 'wb') as file:\n    pickle.dump(_reloaded_state(**request), file)\n"
    )
    # The child finds every module this process can import (the user's own, the companion).
    search_path = os.pathsep.join(
        entry for entry in [os.getcwd(), *sys.path] if entry and os.path.isdir(entry)
    )
    # ... and runs the same Keras backend (KERAS_BACKEND wins over ~/.keras/keras.json).
    environment = {"PYTHONPATH": search_path, "KERAS_BACKEND": keras.backend.backend()}
    result = run_python(code, timeout=timeout, env=environment)
    if result.returncode != 0 or not os.path.exists(answer):
        last = (result.stderr.strip().splitlines() or ["(no error output)"])[-1]
        return {"error": f"the fresh process failed: {keras_message(last)}", "warnings": []}
    with open(answer, "rb") as file:
        return pickle.load(file)


def _differences(before: Any, after: Any, path: str = "config") -> list[str]:
    """Where two serialized configs differ, as ``"config['units']: 3 before, 4 after"``."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in list(before) + [k for k in after if k not in before]:
            if key not in after:
                found.append(f"{path}[{key!r}] is missing after loading")
            elif key not in before:
                found.append(f"{path}[{key!r}] appears only after loading")
            else:
                found.extend(_differences(before[key], after[key], f"{path}[{key!r}]"))
        return found
    if before != after:
        return [
            f"{path}: {shorten(repr(before))} before saving, {shorten(repr(after))} after loading"
        ]
    return []


def _weight_problems(
    before: list[tuple[str, np.ndarray]], after: list[tuple[str, np.ndarray]], atol: float
) -> list[str]:
    if len(before) != len(after):
        return [
            f"weights: {len(before)} before saving, {len(after)} after loading "
            f"(before: {[p for p, _ in before][:6]}, after: {[p for p, _ in after][:6]})"
        ]
    problems = []
    for (path, old), (_, new) in zip(before, after):
        if old.shape != new.shape:
            problems.append(
                f"weight {path!r}: shape {old.shape} before saving, {new.shape} after loading"
            )
        elif _gap(old, new) > atol:
            problems.append(
                f"weight {path!r} differs after loading ({_gap_text(_gap(old, new), atol)})"
            )
    return problems


def _gap(old: np.ndarray, new: np.ndarray) -> float:
    """The largest ``|old - new|`` where both are finite; ``inf`` if NaN or Inf differ in place."""
    if old.dtype.kind not in "biuf" or new.dtype.kind not in "biuf":
        return 0.0 if np.array_equal(old, new) else math.inf
    old, new = old.astype(np.float64), new.astype(np.float64)
    finite = np.isfinite(old) & np.isfinite(new)
    if not np.array_equal(old[~finite], new[~finite], equal_nan=True):
        return math.inf
    return float(np.max(np.abs(old[finite] - new[finite]), initial=0.0))


def _gap_text(gap: float, atol: float) -> str:
    if math.isinf(gap):
        return "NaN, Inf or values in other places"
    return f"max |difference| {gap:.3g} > atol {atol:g}"


def _output_problems(before: list[np.ndarray], after: list[np.ndarray], atol: float) -> list[str]:
    if len(before) != len(after) or any(a.shape != b.shape for a, b in zip(before, after)):
        return [
            f"outputs: shapes {[a.shape for a in before]} before saving, "
            f"{[b.shape for b in after]} after loading"
        ]
    gap = max((_gap(a, b) for a, b in zip(before, after)), default=0.0)
    if gap > atol:
        return [f"outputs on sample_input differ after loading ({_gap_text(gap, atol)})"]
    return []


def _sample_and_output(obj: Any, sample_input: Any) -> tuple[Any, list[np.ndarray] | None]:
    """``(sample_input as arrays, obj's output on it)``, checked; ``(None, None)`` without one."""
    if sample_input is None:
        return None, None
    if isinstance(obj, keras.optimizers.Optimizer):
        raise ValueError(
            f"sample_input: expected None for an optimizer, got {describe(sample_input)}"
        )
    sample_input = as_arrays(sample_input, "sample_input", numbers=False)
    return sample_input, to_numpy(call_on(obj, sample_input, "sample_input"))


def check_roundtrip(
    obj: Any,
    sample_input: Any = None,
    *,
    fresh_process: bool = True,
    atol: float = 1e-6,
    timeout: float = 300,
) -> RoundtripReport:
    """Save ``obj`` to a ``.keras`` file, load it back and report everything that differs.

    The checks, in order, each adding one sentence per problem to ``report.problems``:

    1. every custom (non-Keras) class in ``obj`` has a ``get_config`` that works, is JSON, stores
       each constructor argument, and survives ``from_config`` (a nested layer or other Keras
       object left as a dict by the default ``from_config`` is named);
    2. every custom class or function the saved config names is registered
       (``@keras.saving.register_keras_serializable``) and, for a fresh process, importable from
       a module (a class defined in a notebook lives in ``__main__``, which no other process has);
    3. the file is saved and loaded (``keras.saving.load_model``, ``safe_mode`` on), in a fresh
       Python process that imports only the modules of the registered classes, or in this one;
    4. the loaded object's config, its weights (values, by position) and, with ``sample_input``,
       its outputs equal the original's.

    An optimizer saved on its own comes back unbuilt: a built optimizer's slots are reported
    missing (save it with its compiled model to keep them).

    Args:
        obj: A Keras layer, model or optimizer.
        sample_input: Optional input; ``obj`` is called on it before saving (which builds an
            unbuilt layer) and the loaded copy must give the same output. ``None`` for optimizers.
        fresh_process: Load in a fresh Python process (``companion.notebook.run_python``), as
            a user reloading the file would; ``False`` loads in this process (faster).
        atol: Largest absolute difference allowed between weights and between outputs.
        timeout: Seconds the fresh process may take.

    Returns:
        A ``RoundtripReport``: ``ok``, ``problems`` (sentences), ``notes`` (Keras's warnings);
        ``print(report)`` shows all of it.

    Raises:
        TypeError: If ``obj`` is not a Keras layer, model or optimizer, ``fresh_process`` is not
            a bool, or ``sample_input`` holds something other than arrays.
        ValueError: If ``sample_input`` is given for an optimizer or ``obj`` cannot be called on
            it, ``atol`` is negative or ``timeout`` not a positive number of seconds.

    Example:
        >>> import numpy as np
        >>> from companion.layers import CustomDense
        >>> x = np.ones((1, 3), "float32")
        >>> report = check_roundtrip(CustomDense(2), x, fresh_process=False)
        >>> report.ok, report.problems
        (True, [])

    Taught in chapter 4, "Subclassed models record nothing".
    """
    check_instance(
        obj,
        "obj",
        (keras.layers.Layer, keras.optimizers.Optimizer),
        "a Keras layer, model or optimizer",
    )
    fresh_process = check_bool(fresh_process, "fresh_process")
    atol = check_real(atol, "atol", minimum=0)
    timeout = check_real(timeout, "timeout", above=0, maximum=int(threading.TIMEOUT_MAX))
    sample_input, expected = _sample_and_output(obj, sample_input)
    report = RoundtripReport(subject_of(obj), fresh_process)

    for item in objects_of_custom_classes(obj):
        report.problems.extend(config_problems(item))
    try:
        serialized = json.loads(json.dumps(keras.saving.serialize_keras_object(obj)))
    except Exception as error:  # a get_config that raises, a config that contains itself, ...
        if not report.problems:  # unless a get_config's problem above already says why
            report.problems.append(f"the object cannot be serialized: {error_text(error)}")
        return report
    registration, modules = registration_problems(serialized, fresh_process)
    report.problems.extend(registration)

    with tempfile.TemporaryDirectory() as workdir:
        path = os.path.join(workdir, "object.keras")
        failure = _save(obj, path, report.notes)
        if failure:
            report.problems.append(failure)
            return report
        state = (
            _reload_in_child(path, sample_input, modules, workdir, timeout)
            if fresh_process
            else _reloaded_state(path, sample_input, modules)
        )
    report.notes.extend(state["warnings"])
    if state["error"]:
        report.problems.append(state["error"])
        return report
    report.problems.extend(_differences(serialized, state["config"]))
    before = [(v.path, host_array(v)) for v in _state_variables(obj)]
    report.problems.extend(_weight_problems(before, state["weights"], atol))
    if expected is not None:
        report.problems.extend(_output_problems(expected, state["output"], atol))
    return report
