"""Finding the classic pitfalls of custom layers and models: a save/load round trip that names
what breaks, the first layer (and the first gradient) that goes NaN, a ``tf.function`` that
counts its traces, and a check that a layer works on a batch size it has not seen.

Chapter 11 reproduces each pitfall, detects it with these helpers, fixes it and checks the fix:

- ``check_roundtrip(obj, sample_input)`` saves a layer, model or optimizer to ``.keras``, loads
  it (by default in a fresh Python process, as a user reloading the file would) and compares
  config, weights and outputs; each problem found is a sentence that names what differs.
- ``first_nonfinite(model, inputs)`` runs the model eagerly, watching every sublayer's output,
  and names the first layer that produced a NaN or an Inf; ``first_nonfinite_gradient`` and
  ``gradient_norms`` do the same for the gradients of a training step.
- ``count_traces(fn)`` is ``tf.function(fn)`` that records how often it was traced, and with
  which arguments, so retracing can be measured; ``explain_retrace(counter)`` says which
  argument changed (shape, dtype or Python value) between a trace and the one before it.
- ``check_variable_batch(layer, sample_input)`` traces a layer with the batch size unknown and
  runs it on two batch sizes.
- ``simulated_gpu()`` (from ``companion.devices``) makes ``model.compile()`` choose as it does on
  a machine with a GPU (XLA by default), so the GPU's code path can be tested on a CPU.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import json
import math
import os
import pickle
import re
import sys
import tempfile
import textwrap
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from companion._checks import (
    check_bool,
    check_callable,
    check_instance,
    check_int,
    check_real,
    describe,
)
from companion.devices import simulated_gpu
from companion.notebook import run_python, strip_ansi

__all__ = [
    "RoundtripReport",
    "TraceCounter",
    "check_roundtrip",
    "check_variable_batch",
    "count_traces",
    "explain_retrace",
    "first_nonfinite",
    "first_nonfinite_gradient",
    "gradient_norms",
    "simulated_gpu",
]

#: Longest problem text kept from an error message (Keras appends whole configs to some).
_MESSAGE_LIMIT = 240


# ---------------------------------------------------------------- small shared pieces


def _short(text: str, limit: int = _MESSAGE_LIMIT) -> str:
    text = text.split(" Full object config")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Lines of Keras's and TensorFlow's error messages that say where, not what.
_NOISE = ("Exception encountered when calling", "in user code:")


def _error_text(error: BaseException) -> str:
    """``"TypeName: message"`` on one line, keeping what went wrong and dropping the wrapping.

    A model's loading error wraps its layer's after ``"Exception encountered: "``, and an error
    raised while tracing (``"in user code: File ...  TypeError: ..."``) ends with the original
    error: both keep the inner message. Keras's "Arguments received by ..." footer is dropped.
    """
    text = strip_ansi(str(error)).rsplit("Exception encountered: ", 1)[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    name = type(error).__name__
    raised = [i for i, line in enumerate(lines) if re.match(r"[\w.]*(Error|Exception)\w*: ", line)]
    if raised:  # the last "XxxError: ..." line starts the original error's own text
        lines = lines[raised[-1] :]
        name, lines[0] = lines[0].split(": ", 1)
    kept = []
    for line in lines:
        if line.startswith("Arguments received by"):
            break
        if not line.startswith(_NOISE):
            kept.append(line)
    return _short(f"{name}: {' '.join(kept)}")


def _is_keras_module(module: str | None) -> bool:
    """True for Keras's own modules (its classes never need registering) and ``builtins``."""
    return module is not None and (
        module.split(".")[0] in {"keras", "tf_keras"} or module == "builtins"
    )


def _to_numpy(structure: Any) -> list[np.ndarray]:
    """The leaves of a (nested) output as NumPy arrays, in ``tf.nest`` order."""
    return [np.asarray(leaf) for leaf in tf.nest.flatten(structure)]


def _has_nonfinite(structure: Any) -> bool:
    """True if any floating-point leaf of an (eager) output holds NaN or Inf."""
    for leaf in tf.nest.flatten(structure):
        if not (tf.is_tensor(leaf) or isinstance(leaf, (np.ndarray, keras.Variable))):
            continue
        array = np.asarray(leaf)
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            return True
    return False


def _check_layer(value: Any, name: str) -> keras.layers.Layer:
    return check_instance(value, name, keras.layers.Layer, "a Keras layer or model")


def _describe_input(value: Any) -> str:
    """``"ndarray of shape (2, 3) and dtype float32"`` for an array or tensor (also in a dict);
    else ``describe`` on one line."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        dtype = getattr(value.dtype, "name", value.dtype)
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {dtype}"
    if isinstance(value, dict):
        return (
            "dict {"
            + ", ".join(f"{key!r}: {_describe_input(item)}" for key, item in value.items())
            + "}"
        )
    return " ".join(describe(value).split())


def _as_arrays(value: Any, name: str, *, numbers: bool = True) -> Any:
    """``value`` (an array or tensor, or a list, tuple or dict of them) with NumPy arrays as leaves.

    Raises:
        TypeError: If a leaf is no array (of numbers, when ``numbers``).
        ValueError: If ``value`` holds no array at all (an empty list or dict).
    """
    what = "an array, or a list, tuple or dict of arrays" + (" of numbers" if numbers else "")
    try:
        arrays = tf.nest.map_structure(np.asarray, value)
    except (TypeError, ValueError) as error:  # ragged lists, objects NumPy cannot hold
        raise TypeError(f"{name}: expected {what}, got {describe(value)}") from error
    leaves = tf.nest.flatten(arrays)
    if not leaves:
        raise ValueError(f"{name}: expected {what}, got {describe(value)}")
    if any(leaf.dtype.kind not in ("biuf" if numbers else "biufcSU") for leaf in leaves):
        raise TypeError(f"{name}: expected {what}, got {describe(value)}")
    return arrays


def _finite_arrays(value: Any, name: str) -> list[np.ndarray]:
    """The leaves of ``value`` as arrays of finite numbers (NaN or Inf is no layer's fault)."""
    leaves = tf.nest.flatten(_as_arrays(value, name))
    if any(not np.isfinite(leaf).all() for leaf in leaves):
        raise ValueError(
            f"{name}: expected finite values, got NaN or Inf: no layer is to blame; "
            "clean the data (e.g. tf.debugging.assert_all_finite in the input pipeline)"
        )
    return leaves


@contextlib.contextmanager
def _blaming(name: str, what: str, value: Any) -> Iterator[None]:
    """In the block, an error means that ``value`` does not fit: a ValueError naming ``name``."""
    try:
        yield
    except Exception as error:  # whatever the call raises tells why this value does not fit
        raise ValueError(
            f"{name}: expected {what}, got {_describe_input(value)}; "
            f"the call raised {_error_text(error)}"
        ) from error


def _call_on(obj: Any, value: Any, name: str, **kwargs: Any) -> Any:
    """``obj(value, **kwargs)``; if that fails, ``value`` does not fit: a ValueError naming it."""
    with _blaming(name, f"an input {_subject(obj)} accepts", value):
        return obj(value, **kwargs)


# ---------------------------------------------------------------- check_roundtrip


@dataclass
class RoundtripReport:
    """What ``check_roundtrip`` found.

    Attributes:
        subject: The object checked, e.g. ``"CustomDense 'dense'"``.
        fresh_process: Whether the file was loaded in a fresh Python process.
        problems: One sentence per problem, naming what differs; empty when all is well.
        notes: Warnings Keras gave while saving or loading (not problems by themselves).
    """

    subject: str
    fresh_process: bool
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
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


def _layers_of(obj: Any) -> list[Any]:
    """``obj`` and, for a layer or model, every layer nested in it."""
    if isinstance(obj, keras.layers.Layer):
        return [obj, *obj._flatten_layers(include_self=False, recursive=True)]
    return [obj]


def _custom_objects(obj: Any) -> list[Any]:
    """The objects in ``obj`` whose class is not Keras's own, each class once."""
    seen, found = set(), []
    for item in _layers_of(obj):
        cls = type(item)
        if cls not in seen and not _is_keras_module(cls.__module__):
            seen.add(cls)
            found.append(item)
    return found


def _nonjson_path(value: Any, path: str, ancestors: dict[int, str] | None = None) -> str | None:
    """Where and why ``json.dumps`` cannot write a config (the first such value), or None."""
    ancestors = ancestors or {}
    if isinstance(value, (dict, list, tuple)):
        if id(value) in ancestors:
            return f"{path} refers back to {ancestors[id(value)]} (a cycle)"
        inner = {**ancestors, id(value): path}
        items = value.items() if isinstance(value, dict) else enumerate(value)
        return next(
            filter(None, (_nonjson_path(item, f"{path}[{key!r}]", inner) for key, item in items)),
            None,
        )
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        if isinstance(value, (np.ndarray, np.generic)):
            return (
                f"{path} holds a {type(value).__name__} object; "
                "store a list (array.tolist()) instead"
            )
        what = (
            f"the function {value.__name__}"
            if inspect.isroutine(value)
            else f"a {type(value).__name__} object"
        )
        return (
            f"{path} holds {what}; "
            "store a name or keras.saving.serialize_keras_object(...) of it instead"
        )
    return None


def _is_serialized_object(value: Any) -> bool:
    return isinstance(value, dict) and "class_name" in value and "config" in value


def _config_problems(item: Any) -> list[str]:
    """Problems of one custom class's ``get_config``/``from_config`` pair."""
    cls = type(item).__name__
    try:
        config = item.get_config()
    except Exception as error:  # whatever the user's get_config raises is the finding
        return [f"{cls}.get_config() raised {_error_text(error)}"]
    bad = _nonjson_path(config, "config")
    if bad:
        return [f"{cls}.get_config() is not JSON: {bad}"]
    problems, unstored = [], []
    if not _is_keras_module(_defining_module(type(item), "get_config")):  # written by the user
        for name, parameter in _constructor_arguments(type(item)):
            if name not in config:
                fallback = (
                    "fails (no default)"
                    if parameter.default is parameter.empty
                    else f"gets the default {parameter.default!r}"
                )
                unstored.append(
                    f"{cls}.get_config() does not store the constructor argument {name!r}: "
                    f"from_config {fallback}"
                )
    elif isinstance(item, keras.Model) and not _is_functional(item):
        names = [name for name, _ in _constructor_arguments(type(item))]
        if names:
            problems.append(
                f"{cls} is a subclassed Model without its own get_config: Keras records no "
                f"constructor arguments of a model ({', '.join(names)}), so loading builds it "
                f"with their defaults; write get_config"
            )
    if unstored or isinstance(item, keras.optimizers.Optimizer):
        return unstored
    return problems + _from_config_problems(item, json.loads(json.dumps(config)))


def _constructor_arguments(cls: type) -> list[tuple[str, inspect.Parameter]]:
    """The named parameters of ``cls.__init__`` (no ``self``, ``*args`` or ``**kwargs``)."""
    parameters = inspect.signature(cls.__init__).parameters.items()
    return [
        (name, parameter)
        for name, parameter in parameters
        if name != "self"
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]


def _is_functional(model: keras.Model) -> bool:
    """True for a model built from inputs and outputs (its config is the graph, not arguments)."""
    return any(
        klass.__name__ == "Functional" and _is_keras_module(klass.__module__)
        for klass in type(model).__mro__
    )


def _defining_module(cls: type, attribute: str) -> str | None:
    """The module of the class in ``cls``'s MRO that defines ``attribute``."""
    owner = next((klass for klass in cls.__mro__ if attribute in vars(klass)), None)
    return None if owner is None else owner.__module__


def _from_config_problems(item: Any, config: dict[str, Any]) -> list[str]:
    cls = type(item).__name__
    try:
        restored = type(item).from_config(config)
    except Exception as error:  # whatever the user's constructor raises is the finding
        return [f"{cls}.from_config(get_config()) raised {_error_text(error)}"]
    return [
        f"{cls}.from_config passed config[{key!r}] (a serialized {value['class_name']}) to "
        "__init__ as a dict: override from_config to deserialize it "
        "(keras.saving.deserialize_keras_object)"
        for key, value in config.items()
        if _is_serialized_object(value) and isinstance(getattr(restored, key, None), dict)
    ]


def _registry_entries(serialized: Any) -> Iterator[tuple[str, str]]:
    """(kind, lookup key) of every non-Keras class or function named in a serialized config."""
    if isinstance(serialized, dict):
        if _is_serialized_object(serialized):
            name, module = serialized["class_name"], serialized.get("module")
            # Keras's own are strings
            if name == "function" and not (module or "").startswith("keras"):
                yield "function", str(serialized["config"])
            elif not _is_keras_marker(name) and not _is_keras_module(module):
                yield "class", serialized.get("registered_name") or name
        for value in serialized.values():
            yield from _registry_entries(value)
    elif isinstance(serialized, (list, tuple)):
        for value in serialized:
            yield from _registry_entries(value)


def _is_keras_marker(name: str) -> bool:
    """Keras's own entries that are no class to look up: ``__lambda__`` (bytecode), a functional
    model's ``__keras_tensor__`` (a node's input), ``__tensor__``, ``__numpy__``, ..."""
    return name.startswith("__") and name.endswith("__")


#: Where Keras looks up a function saved by its bare name (``serialization_lib.BUILTIN_MODULES``).
_FUNCTION_MODULES = (
    "activations",
    "constraints",
    "initializers",
    "losses",
    "metrics",
    "optimizers",
    "regularizers",
)


def _is_keras_function(name: str) -> bool:
    return any(hasattr(getattr(keras, module), name) for module in _FUNCTION_MODULES)


def _registration(serialized: dict[str, Any], fresh_process: bool) -> tuple[list[str], list[str]]:
    """(problems, modules the loading process must import) for the custom names in a config."""
    problems, modules = [], []
    for kind, key in dict.fromkeys(_registry_entries(serialized)):
        found = keras.saving.get_registered_object(key)
        if found is None and kind == "function" and _is_keras_function(key):
            continue
        if found is None:
            problems.append(
                f"{kind} {key!r} is not registered: load_model finds it only with custom_objects="
                f"{{{key!r}: ...}}; decorate it with @keras.saving.register_keras_serializable()"
            )
        elif found.__module__ == "__main__":
            if fresh_process:
                problems.append(
                    f"{kind} {key!r} is defined in __main__ (a notebook or script): a fresh "
                    "process cannot import it; move it into a module and import that before "
                    "loading"
                )
        elif found.__module__ not in modules:
            modules.append(found.__module__)
    return problems, modules


def _warning_texts(caught: list[warnings.WarningMessage]) -> list[str]:
    """The messages of Keras's warnings (NumPy's deprecation notices about Keras left out)."""
    return [
        _short(str(w.message))
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
            return f"saving failed: {_error_text(error)}"
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
            state["weights"] = [(v.path, np.asarray(v)) for v in _state_variables(obj)]
            if sample_input is not None:
                state["output"] = _to_numpy(obj(sample_input))
        except Exception as error:  # any failure to import, load or call is the finding
            state["error"] = f"load_model failed: {_error_text(error)}"
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
        "from companion.diagnostics import _reloaded_state\n"
        f"with open({request!r}, 'rb') as file:\n    request = pickle.load(file)\n"
        f"with open({answer!r}, 'wb') as file:\n    pickle.dump(_reloaded_state(**request), file)\n"
    )
    # The child finds every module this process can import (the user's own, the companion).
    search_path = os.pathsep.join(
        entry for entry in [os.getcwd(), *sys.path] if entry and os.path.isdir(entry)
    )
    result = run_python(code, timeout=timeout, env={"PYTHONPATH": search_path})
    if result.returncode != 0 or not os.path.exists(answer):
        last = (result.stderr.strip().splitlines() or ["(no error output)"])[-1]
        return {"error": f"the fresh process failed: {_short(last)}", "warnings": []}
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
            f"{path}: {_short(repr(before), 60)} before saving, "
            f"{_short(repr(after), 60)} after loading"
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


def _subject(obj: Any) -> str:
    """``"Dense 'dense'"``: the object's class and, if it has one, its name."""
    name = getattr(obj, "name", None)
    return type(obj).__name__ if name is None else f"{type(obj).__name__} {name!r}"


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
    if sample_input is not None and isinstance(obj, keras.optimizers.Optimizer):
        raise ValueError(
            f"sample_input: expected None for an optimizer, got {describe(sample_input)}"
        )
    expected = None
    if sample_input is not None:
        sample_input = _as_arrays(sample_input, "sample_input", numbers=False)
        expected = _to_numpy(_call_on(obj, sample_input, "sample_input"))
    report = RoundtripReport(_subject(obj), fresh_process)

    for item in _custom_objects(obj):
        report.problems.extend(_config_problems(item))
    try:
        serialized = json.loads(json.dumps(keras.saving.serialize_keras_object(obj)))
    except Exception as error:  # a get_config that raises, a config that contains itself, ...
        if not report.problems:  # unless a get_config's problem above already says why
            report.problems.append(f"the object cannot be serialized: {_error_text(error)}")
        return report
    registration, modules = _registration(serialized, fresh_process)
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
    before = [(v.path, np.asarray(v)) for v in _state_variables(obj)]
    report.problems.extend(_weight_problems(before, state["weights"], atol))
    if expected is not None:
        report.problems.extend(_output_problems(expected, state["output"], atol))
    return report


# ---------------------------------------------------------------- shapes


def check_variable_batch(layer: Any, sample_input: Any) -> list[str]:
    """Check that ``layer`` works when the batch size is unknown while tracing.

    Keras traces layers with the batch dimension ``None`` (``keras.Input``, ``fit``,
    ``model.export``). A layer that uses ``x.shape[0]`` as a number works eagerly and breaks
    there. This traces ``layer`` under ``tf.function`` with every input's first dimension set
    to ``None``, then runs the traced graph on the whole sample and on its first row, and
    compares both with the eager call.

    Args:
        layer: A Keras layer or model (or any callable taking one, possibly nested, input).
        sample_input: An input with a batch of at least 2 (an array, or a list/dict of arrays).

    Returns:
        Problems, one sentence each; an empty list when the layer passes.

    Raises:
        TypeError: If ``layer`` is not callable, or ``sample_input`` holds something other than
            arrays of numbers.
        ValueError: If an input of ``sample_input`` has no batch dimension or a batch below 2,
            or the layer cannot be called on it (eagerly: nothing to compare the trace with).

    Example:
        >>> import numpy as np
        >>> check_variable_batch(keras.layers.Dense(2), np.ones((3, 4), "float32"))
        []
    """
    check_callable(layer, "layer", "a callable layer or model")
    sample_input = _as_arrays(sample_input, "sample_input")
    for leaf in tf.nest.flatten(sample_input):
        if leaf.ndim < 1 or leaf.shape[0] < 2:
            raise ValueError(
                "sample_input: expected arrays with a batch of at least 2, "
                f"got {_describe_input(leaf)}"
            )
    expected = _to_numpy(_call_on(layer, sample_input, "sample_input"))
    specs = tf.nest.map_structure(
        lambda a: tf.TensorSpec((None, *a.shape[1:]), tf.as_dtype(a.dtype)), sample_input
    )
    traced = tf.function(lambda inputs: layer(inputs), input_signature=[specs])
    try:
        concrete = traced.get_concrete_function()
    except Exception as error:  # whatever the layer raises while tracing is the finding
        return [f"tracing with batch size None failed: {_error_text(error)}"]
    problems = []
    for rows in (None, 1):
        part = tf.nest.map_structure(lambda a: a[:rows], sample_input)
        try:
            got = _to_numpy(concrete(part))
        except Exception as error:  # a graph that runs for one batch size only
            problems.append(
                f"the traced graph failed on a batch of {len(tf.nest.flatten(part)[0])}: "
                f"{_error_text(error)}"
            )
            continue
        want = [a[:rows] for a in expected]
        if any(g.shape != w.shape or not np.allclose(g, w, atol=1e-5) for g, w in zip(got, want)):
            problems.append(
                f"the traced graph's output on a batch of {len(tf.nest.flatten(part)[0])} "
                f"differs from the eager call's"
            )
    return problems


# ---------------------------------------------------------------- non-finite values


def _layer_paths(model: keras.layers.Layer) -> dict[int, tuple[keras.layers.Layer, str]]:
    """id(layer) -> (layer, "outer/inner" path) for every layer nested in ``model``."""
    paths: dict[int, tuple[keras.layers.Layer, str]] = {}

    def visit(layer: keras.layers.Layer, prefix: str) -> None:
        for child in layer._flatten_layers(include_self=False, recursive=False):
            if id(child) not in paths:
                paths[id(child)] = (child, prefix + child.name)
                visit(child, prefix + child.name + "/")

    visit(model, "")
    return paths


@contextlib.contextmanager
def _watching_calls(
    layers: list[tuple[keras.layers.Layer, str]],
    entering: Callable[[str, tuple], None],
    leaving: Callable[[str, Any], None],
) -> Iterator[None]:
    """Within the block, each layer's ``call`` reports ``(path, args)`` to ``entering`` when it
    starts and ``(path, output)`` to ``leaving`` when it returns."""
    wrapped = []
    try:
        for layer, path in layers:
            if "call" in vars(layer):  # an instance-level call of the user's: leave it alone
                continue
            original = layer.call

            @functools.wraps(original)
            def call(
                *args: Any, _original: Callable = original, _path: str = path, **kwargs: Any
            ) -> Any:
                entering(_path, args)
                output = _original(*args, **kwargs)
                leaving(_path, output)
                return output

            layer.call = call
            wrapped.append(layer)
        yield
    finally:
        for layer in wrapped:
            del layer.call


def first_nonfinite(
    model: keras.layers.Layer, inputs: Any, *, training: bool = False
) -> str | None:
    """The first layer, in execution order, whose output contains NaN or Inf, or ``None``.

    The model is called once, eagerly, with every nested layer's ``call`` wrapped to inspect
    its output; a layer's output is complete when its sublayers have run, so inside a
    composite layer the innermost culprit is named (``"block/hidden"``). Sequential,
    functional and subclassed models all work, since each calls its layers. When a layer
    *receives* NaN or Inf that no layer produced (a raw op in a subclassed model's ``call``
    made it), the result is ``"<model>.call, before '<layer>'"``; when only the model's final
    output is non-finite, the model's own name.

    Args:
        model: A Keras model or layer.
        inputs: What the model is called with (finite values).
        training: The ``training`` flag of the call (``True`` enables dropout and the like).

    Returns:
        The layer's path (names joined by ``/``), or ``None`` if every output is finite.

    Raises:
        TypeError: If ``model`` is not a Keras layer or model, ``training`` not a bool, or
            ``inputs`` holds something other than arrays of numbers.
        ValueError: If ``inputs`` already contain NaN or Inf (no layer is to blame), or the
            model cannot be called on them.

    Example:
        >>> import numpy as np
        >>> dense = keras.layers.Dense(2, name="dense")
        >>> log = keras.layers.Lambda(keras.ops.log, name="log")
        >>> model = keras.Sequential([keras.Input((2,)), dense, log])
        >>> dense.set_weights([-np.eye(2, dtype="float32"), np.zeros(2, "float32")])
        >>> first_nonfinite(model, np.ones((1, 2), "float32"))
        'log'
    """
    model = _check_layer(model, "model")
    training = check_bool(training, "training")
    _finite_arrays(inputs, "inputs")
    found: list[str] = []

    def entering(path: str, args: tuple) -> None:
        if not found and _has_nonfinite(args):
            found.append(f"{model.name}.call, before {path!r}")

    def leaving(path: str, output: Any) -> None:
        if not found and _has_nonfinite(output):
            found.append(path)

    with _watching_calls(list(_layer_paths(model).values()), entering, leaving):
        output = _call_on(model, inputs, "inputs", training=training)
    if found:
        return found[0]
    return model.name if _has_nonfinite(output) else None


def _gradients(
    model: keras.layers.Layer, inputs: Any, targets: Any, loss: Callable[..., Any], training: bool
) -> list[tuple[str, Any]]:
    """(variable path, gradient or None) of a training step, output-side variables first."""
    model = _check_layer(model, "model")
    check_callable(loss, "loss", "a callable loss(y_true, y_pred)")
    training = check_bool(training, "training")
    _finite_arrays(inputs, "inputs")
    target_arrays = _finite_arrays(targets, "targets")
    with tf.GradientTape() as tape:
        output = _call_on(model, inputs, "inputs", training=training)
        _check_batch(target_arrays, output)
        with _blaming(
            "targets",
            f"targets that loss accepts for the output ({_describe_input(output)})",
            targets,
        ):
            value = loss(targets, output)
        if model.losses:
            value = value + tf.add_n(model.losses)
    variables = list(model.trainable_variables)  # after the call, which builds an unbuilt model
    gradients = tape.gradient(value, variables)
    pairs = [
        (v.path, None if g is None else tf.convert_to_tensor(g))
        for v, g in zip(variables, gradients)
    ]
    return pairs[::-1]


def _check_batch(targets: list[np.ndarray], output: Any) -> None:
    """Each target has the batch size of the model's output."""
    first = tf.nest.flatten(output)[0]
    batch = first.shape[0] if len(first.shape) else None
    for leaf in targets:
        if batch is not None and (leaf.ndim < 1 or leaf.shape[0] != batch):
            raise ValueError(
                f"targets: expected arrays with the batch size of the model's output ({batch}), "
                f"got {_describe_input(leaf)}"
            )


def gradient_norms(
    model: keras.layers.Layer,
    inputs: Any,
    targets: Any,
    *,
    loss: Callable[..., Any],
    training: bool = True,
) -> dict[str, float | None]:
    """The L2 norm of each variable's gradient for one training step (forward, loss, backward).

    The loss is ``loss(targets, model(inputs))`` plus the model's regularization losses.
    Variables come in reverse creation order: for a stack of layers, the order backpropagation
    reaches them. Norms are computed in float64, so a large but finite gradient is not
    reported as ``inf``. Track the global norm, ``sqrt(sum(n**2))``, over steps to see
    gradients explode before the loss does.

    Args:
        model: A Keras model or layer with trainable variables.
        inputs: The batch's inputs.
        targets: The batch's targets.
        loss: ``loss(y_true, y_pred)`` returning a scalar (a Keras loss object works).
        training: The ``training`` flag of the forward pass.

    Returns:
        ``{variable path: norm}``; ``None`` for a variable the loss does not depend on.

    Raises:
        TypeError: If ``model`` is not a Keras layer/model, ``loss`` is not callable,
            ``training`` is not a bool, or ``inputs`` or ``targets`` hold something other than
            arrays of numbers.
        ValueError: If ``inputs`` or ``targets`` hold NaN or Inf (no layer is to blame), the
            model cannot be called on ``inputs``, or ``targets`` do not fit its output (another
            batch size, or ``loss`` fails on them).

    Example:
        >>> import numpy as np
        >>> dense = keras.layers.Dense(1, kernel_initializer="ones", name="d")
        >>> x, y = np.ones((1, 2), "float32"), np.zeros((1, 1), "float32")
        >>> norms = gradient_norms(dense, x, y, loss=keras.losses.MeanSquaredError())
        >>> {path: round(norm, 3) for path, norm in norms.items()}  # d/db (2 + b)^2 = 4
        {'d/bias': 4.0, 'd/kernel': 5.657}
    """
    return {
        path: None if g is None else float(tf.norm(tf.cast(g, tf.float64)))
        for path, g in _gradients(model, inputs, targets, loss, training)
    }


def first_nonfinite_gradient(
    model: keras.layers.Layer,
    inputs: Any,
    targets: Any,
    *,
    loss: Callable[..., Any],
    training: bool = True,
) -> str | None:
    """The path of the first variable, in backpropagation order, whose gradient holds NaN or Inf.

    Backpropagation reaches the output-side layers first, and a NaN spreads from where it
    appears towards the inputs, so the first non-finite gradient in this order is the one
    closest to where it arose. A forward pass can be finite while a gradient is not (the
    derivative of ``sqrt`` at 0 is infinite): check both.

    Args:
        model: A Keras model or layer with trainable variables.
        inputs: The batch's inputs.
        targets: The batch's targets.
        loss: ``loss(y_true, y_pred)`` returning a scalar.
        training: The ``training`` flag of the forward pass.

    Returns:
        The variable's path (``"dense_1/kernel"``), or ``None`` if all gradients are finite.

    Raises:
        TypeError: As for ``gradient_norms``.

    Example:
        >>> import numpy as np
        >>> dense = keras.layers.Dense(1, name="d")
        >>> x, y = np.ones((1, 2), "float32"), np.zeros((1, 1), "float32")
        >>> def sqrt_of_zero(y, p):
        ...     return keras.ops.sum(keras.ops.sqrt(keras.ops.abs(p - p)))
        >>> first_nonfinite_gradient(dense, x, y, loss=sqrt_of_zero)
        'd/bias'
    """
    for path, gradient in _gradients(model, inputs, targets, loss, training):
        if gradient is not None and not np.isfinite(np.asarray(gradient)).all():
            return path
    return None


# ---------------------------------------------------------------- tracing


def _describe_value(value: Any) -> str:
    """``float32[None, 3]`` for a tensor or variable, the short repr for a Python value."""
    if hasattr(value, "dtype") and hasattr(value, "shape") and not isinstance(value, np.ndarray):
        shape = ", ".join(
            "None" if d is None else str(d) for d in tf.TensorShape(value.shape).as_list() or []
        )
        return f"{tf.as_dtype(value.dtype).name}[{shape}]"
    if isinstance(value, np.ndarray):
        return f"ndarray {value.dtype}{list(value.shape)}"
    return _short(repr(value), 40)


class TraceCounter:
    """``tf.function(fn)`` that records every trace: how many, and with which arguments.

    A ``tf.function`` runs the Python body only while tracing. Each trace appends one line to
    ``signatures``: the arguments as the trace saw them, ``float32[None, 3]`` for a tensor
    (``None`` where the shape is left open) and the value for a Python argument, which is
    part of the trace's key (a new value, a new trace). Build one with ``count_traces``.

    Attributes:
        function: The underlying ``tf.function`` (``experimental_get_tracing_count()`` agrees
            with ``traces``).
        signatures: One line per trace, e.g. ``"x=float32[2, 3], scale=2.0"``.
    """

    def __init__(self, fn: Callable[..., Any], **tf_function_kwargs: Any) -> None:
        check_callable(fn, "fn")
        self.signatures: list[str] = []
        self._arguments: list[dict[str, tuple]] = []  # per trace: {argument path: leaf key}
        try:
            self._parameters: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            self._parameters = None

        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.signatures.append(self._describe_call(args, kwargs))
            self._arguments.append(self._leaf_keys(args, kwargs))
            return fn(*args, **kwargs)

        self.function = tf.function(recorded, **tf_function_kwargs)
        functools.update_wrapper(self, fn)

    def _describe_call(self, args: tuple, kwargs: dict[str, Any]) -> str:
        describe_leaves = functools.partial(tf.nest.map_structure, _describe_value)
        try:
            bound = self._parameters.bind(*args, **kwargs).arguments if self._parameters else None
        except TypeError:
            bound = None
        if bound is None:
            items = [str(describe_leaves(a)) for a in args] + [
                f"{k}={describe_leaves(v)}" for k, v in kwargs.items()
            ]
        else:
            items = [
                f"{name}={describe_leaves(value)}".replace("'", "") for name, value in bound.items()
            ]
        return ", ".join(items)

    def _leaf_keys(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, tuple]:
        """``{"x": ("tensor", "float32", "[2, 3]"), "cfg['a']": ("value", "2.0")}``."""
        try:
            bound = self._parameters.bind(*args, **kwargs).arguments if self._parameters else None
        except TypeError:
            bound = None
        named = bound if bound is not None else {f"args[{i}]": a for i, a in enumerate(args)}
        return dict(_leaf_paths(dict(named) | ({} if bound is not None else kwargs)))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    @property
    def traces(self) -> int:
        """How many times the function was traced."""
        return len(self.signatures)

    def __repr__(self) -> str:
        return f"<TraceCounter {getattr(self, '__name__', 'fn')}: {self.traces} trace(s)>"


def count_traces(fn: Callable[..., Any] | None = None, /, **tf_function_kwargs: Any) -> Any:
    """Wrap ``fn`` in ``tf.function`` (with ``tf_function_kwargs``) and count its traces.

    Use it like ``tf.function``: ``count_traces(fn)``, ``@count_traces`` or
    ``@count_traces(reduce_retracing=True)``.

    Args:
        fn: The Python function; omitted when used as ``@count_traces(...)`` with arguments.
        **tf_function_kwargs: Passed to ``tf.function`` (``input_signature``,
            ``reduce_retracing``, ``jit_compile``, ...).

    Returns:
        A ``TraceCounter`` (or, without ``fn``, a decorator that makes one).

    Raises:
        TypeError: If ``fn`` is not callable.

    Example:
        >>> @count_traces
        ... def scale(x, factor):
        ...     return x * factor
        >>> for factor in (1.0, 2.0, 2.0):
        ...     _ = scale(tf.ones(3), factor)  # a Python float: a trace per new value
        >>> scale.traces, scale.signatures[-1]
        (2, 'x=float32[3], factor=2.0')
    """
    if fn is None:
        return lambda function: TraceCounter(function, **tf_function_kwargs)
    return TraceCounter(fn, **tf_function_kwargs)


def _leaf_paths(value: Any, path: str = "") -> Iterator[tuple[str, tuple]]:
    """(path, key) for each leaf of a call's arguments: ``("tensor", dtype, shape)`` for a
    tensor or variable, ``("value", repr)`` for a Python value (what a trace is keyed by)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_paths(item, f"{path}[{key!r}]" if path else str(key))
    elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        for index, item in enumerate(value):
            yield from _leaf_paths(item, f"{path}[{index}]")
    else:
        described = _describe_value(value)
        if (
            hasattr(value, "dtype")
            and hasattr(value, "shape")
            and not isinstance(value, np.ndarray)
        ):
            dtype, shape = described.split("[", 1)  # "float32[None, 3]"
            yield path, ("tensor", dtype, "[" + shape)
        else:
            yield path, ("value", described)


def _leaf_text(key: tuple) -> str:
    return f"Python value {key[1]}" if key[0] == "value" else f"tensor {key[1]}{key[2]}"


def _leaf_changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """One phrase per argument that differs between two traces' leaf keys."""
    changes = []
    for path in [*before, *(p for p in after if p not in before)]:
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if old is None or new is None:
            changes.append(f"{path} {'is new' if old is None else 'is gone'}")
        elif old[0] == new[0] == "value":
            changes.append(f"{path}: Python value {old[1]} -> {new[1]}")
        elif old[0] == new[0] == "tensor":
            parts = [f"dtype {old[1]} -> {new[1]}"] if old[1] != new[1] else []
            parts += [f"shape {old[2]} -> {new[2]}"] if old[2] != new[2] else []
            changes.append(f"{path}: {', '.join(parts)}")
        else:
            changes.append(f"{path}: {_leaf_text(old)} -> {_leaf_text(new)}")
    return changes


def _distance(before: dict[str, tuple], after: dict[str, tuple]) -> int:
    """How many things differ: a dtype, a shape, a value count one each; a new kind two."""
    return sum(
        sum(a != b for a, b in zip(old, new)) if old and new and old[0] == new[0] else 2
        for path in {*before, *after}
        if (old := before.get(path)) != (new := after.get(path))
    )


def explain_retrace(counter: TraceCounter, trace: int = -1) -> str:
    """Say why ``counter`` traced again: which arguments differ from the closest earlier trace.

    A ``tf.function`` traces when a call matches none of its traces; the closest earlier trace
    (the fewest dtypes, shapes and values differing; the most recent among equals) shows what
    the call changed: a tensor's shape or dtype, or the value of a Python argument (every new
    value traces). Nested arguments are named by path (``batch['image']``, ``pair[1]``).

    Args:
        counter: A ``TraceCounter`` (from ``count_traces``) that has traced at least twice.
        trace: Which trace to explain, an index into ``counter.signatures`` other than the
            first (default: the last).

    Returns:
        ``"trace 2 of 2, against trace 1: factor: Python value 2.0 -> 3.0"``, changes
        separated by ``"; "``; ``counter.signatures`` holds each trace's arguments. If no
        argument differs, the sentence says so (the function retraced for another reason).

    Raises:
        TypeError: If ``counter`` is not a ``TraceCounter`` or ``trace`` not an int.
        ValueError: If ``trace`` is the first trace (there is nothing to compare it with) or
            out of range.

    Example:
        >>> @count_traces
        ... def scale(x, factor):
        ...     return x * factor
        >>> x = tf.ones(3)
        >>> _ = scale(x, 2.0), scale(x, 3.0), scale(tf.ones(4), 3.0)
        >>> print(explain_retrace(scale, 1))
        trace 2 of 3, against trace 1: factor: Python value 2.0 -> 3.0
        >>> print(explain_retrace(scale))  # trace 2 is closer than 1
        trace 3 of 3, against trace 2: x: shape [3] -> [4]
    """
    check_instance(counter, "counter", TraceCounter, "a TraceCounter (from count_traces)")
    count = counter.traces
    trace = check_int(trace, "trace", minimum=-count, maximum=count - 1)
    index = trace % count
    if index == 0:
        raise ValueError(
            f"trace: expected the index of a retrace (not 0 or -{count}: the first of "
            f"{count} trace(s) has nothing to compare with), got {describe(trace)}"
        )
    after = counter._arguments[index]
    earlier = counter._arguments[:index]
    closest = min(range(index), key=lambda i: (_distance(earlier[i], after), -i))
    said = (
        "; ".join(_leaf_changes(earlier[closest], after))
        or "no argument differs (not retraced for an argument)"
    )
    return f"trace {index + 1} of {count}, against trace {closest + 1}: {said}"
