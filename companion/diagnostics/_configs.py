"""Whether an object's config can be saved and loaded: each custom class's ``get_config`` /
``from_config`` pair, and the registration of every custom name the config holds.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

from companion._text import error_text


def _is_keras_module(module: str | None) -> bool:
    """True for Keras's own modules (its classes never need registering) and ``builtins``."""
    return module is not None and (
        module.split(".")[0] in {"keras", "tf_keras"} or module == "builtins"
    )


def _layers_of(obj: Any) -> list[Any]:
    """``obj`` and, for a layer or model, every layer nested in it."""
    if isinstance(obj, keras.layers.Layer):
        return [obj, *obj._flatten_layers(include_self=False, recursive=True)]
    return [obj]


def objects_of_custom_classes(obj: Any) -> list[Any]:
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


def config_problems(item: Any) -> list[str]:
    """Problems of one custom class's ``get_config``/``from_config`` pair."""
    cls = type(item).__name__
    try:
        config = item.get_config()
    except Exception as error:  # whatever the user's get_config raises is the finding
        return [f"{cls}.get_config() raised {error_text(error)}"]
    bad = _nonjson_path(config, "config")
    if bad:
        return [f"{cls}.get_config() is not JSON: {bad}"]
    if not _is_keras_module(_defining_module(type(item), "get_config")):  # written by the user
        unstored = _unstored_arguments(item, config)
        if unstored:
            return unstored
        problems = []
    else:
        problems = _inherited_model_config(item)
    if isinstance(item, keras.optimizers.Optimizer):
        return []
    return problems + _from_config_problems(item, json.loads(json.dumps(config)))


def _unstored_arguments(item: Any, config: dict[str, Any]) -> list[str]:
    """One sentence per argument of ``item``'s constructor that its ``config`` does not store."""
    cls = type(item).__name__
    return [
        f"{cls}.get_config() does not store the constructor argument {name!r}: from_config "
        + (
            "fails (no default)"
            if parameter.default is parameter.empty
            else f"gets the default {parameter.default!r}"
        )
        for name, parameter in _constructor_arguments(type(item))
        if name not in config
    ]


def _inherited_model_config(item: Any) -> list[str]:
    """The problem of a subclassed model with constructor arguments and Keras's ``get_config``,
    which records none of them."""
    if not isinstance(item, keras.Model) or _is_functional(item):
        return []
    names = [name for name, _ in _constructor_arguments(type(item))]
    if not names:
        return []
    return [
        f"{type(item).__name__} is a subclassed Model without its own get_config: Keras records "
        f"no constructor arguments of a model ({', '.join(names)}), so loading builds it with "
        f"their defaults; write get_config"
    ]


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
        return [f"{cls}.from_config(get_config()) raised {error_text(error)}"]
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


def registration_problems(
    serialized: dict[str, Any], fresh_process: bool
) -> tuple[list[str], list[str]]:
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
