"""``python -m companion.bench`` (``make bench``): run the headline measures, print a table,
write a JSON file."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from companion._checks import (
    check_calls,
    check_instance,
    check_int,
    check_path,
    check_sequence,
    describe,
)
from companion.bench._experiments import (
    blur_in_model,
    blur_op,
    blur_pipeline,
    compiled_blur_vs_opencv,
    per_example_vs_batched,
    training_step_modes,
)
from companion.bench._harness import default_sizes, resolve_device
from companion.bench._headline import (
    LOOP_MODELS,
    MAX_EPOCHS,
    MAX_EXAMPLES,
    adamw_step_time,
    training_loop_vs_fit,
)
from companion.bench._records import Entry, Row, rows_to_entries
from companion.notebook import format_table
from companion.timing import MAX_REPEATS

#: ``python -m companion.bench --quick``: tiny sizes that check the whole run in seconds.
QUICK_SIZES = {
    "image_sizes": (16, 32),
    "batch_size": 2,
    "image_size": 16,
    "examples": 8,
    "batch_sizes": (4,),
    "per_image_size": 8,
}


def main(
    argv: list[str] | None = None, *, blur_methods: Mapping[str, Callable[..., Any]] | None = None
) -> list[Entry]:
    """``python -m companion.bench``: run the benchmarks, print a table, write a JSON file.

    The headline experiments of chapter 12 (the blurs at two image sizes as an op, in a model and
    in a ``tf.data`` pipeline; eager vs ``tf.function`` vs XLA training steps; a per-image loop
    vs ``tf.vectorized_map`` vs batched ops), chapter 13's compiled blur vs OpenCV, then chapter 7's
    custom loop vs ``model.fit`` (on its model and a small MLP) and chapter 9's AdamW vs Keras's.
    Progress is printed as it goes.

    Args:
        argv: Command-line arguments (``--output``, ``--repeats``, ``--examples``, ``--epochs``,
            ``--device``, ``--quick``), a list of str; None reads ``sys.argv``.
        blur_methods: The blurs to compare, name -> ``fn(images)``; ``None``:
            ``default_blur_methods()``. Must include ``"native"``, the reference.

    Returns:
        The entries written to the JSON file, one ``Entry`` per measure.

    Raises:
        TypeError: If ``argv`` is not a list of str or ``blur_methods`` not a mapping of callables.
        ValueError: If ``blur_methods`` is empty or has no ``"native"``.
        SystemExit: For an unknown flag or a bad flag value (argparse's usage and message,
            exit status 2), before anything runs.

    Taught in chapter 12, "make bench: the headline numbers in one command".
    """
    argv, blur_methods = _check_main_arguments(argv, blur_methods)
    args = _parser().parse_args(argv)
    device = resolve_device(args.device)
    print(f"device: {device}", flush=True)
    entries = []
    measures = _measures(args, device, blur_methods)
    for number, (title, measure) in enumerate(measures, 1):
        print(f"[{number}/{len(measures)}] {title}:", flush=True)
        entries += measure()
    _report(entries, device, args.output)
    return entries


def _check_main_arguments(
    argv: Any, blur_methods: Any
) -> tuple[list[str] | None, dict[str, Callable[..., Any]] | None]:
    """``main``'s arguments checked: ``argv`` as a list, ``blur_methods`` as a dict with
    ``"native"``."""
    if argv is not None:
        argv = list(
            check_sequence(
                argv,
                "argv",
                "a list or tuple of str (command-line arguments) or None",
                min_length=0,
                item=lambda text, name: check_instance(text, name, str, "a str"),
            )
        )
    if blur_methods is not None:
        blur_methods = check_calls(blur_methods, "blur_methods")
        if "native" not in blur_methods:
            raise ValueError(
                f"blur_methods: expected a mapping of names to blurs that includes 'native' (the "
                f"reference), got {describe(blur_methods)}"
            )
    return argv, blur_methods


def _parser() -> argparse.ArgumentParser:
    """The command line of ``main``: each flag's value checked as the function's argument."""
    parser = argparse.ArgumentParser(
        prog="python -m companion.bench", description=main.__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--output",
        default="_build/bench.json",
        type=_flag(lambda text: check_path(text, "--output")),
        help="JSON file to write (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=_int_flag("--repeats", 1, MAX_REPEATS),
        default=5,
        help="runs of each side (default: %(default)s)",
    )
    parser.add_argument(
        "--examples",
        type=_int_flag("--examples", max(batch for _, batch in LOOP_MODELS.values()), MAX_EXAMPLES),
        default=None,
        help="training examples of the loop benchmarks (default: 1024 for chapter 7's model, "
        "4096 for the MLP)",
    )
    parser.add_argument(
        "--epochs",
        type=_int_flag("--epochs", 1, MAX_EPOCHS),
        default=5,
        help="epochs per timed fit call (default: %(default)s)",
    )
    parser.add_argument(
        "--device",
        type=_flag(resolve_device),
        default=None,
        help="device string, e.g. /CPU:0 (default: GPU if any, else CPU)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: a smoke test of the whole run"
    )
    return parser


def _measures(
    args: argparse.Namespace,
    device: str,
    blur_methods: Mapping[str, Callable[..., Any]] | None,
) -> list[tuple[str, Callable[[], list[Entry]]]]:
    """``(title, run)`` of every measure ``main`` runs, in order; ``run()`` returns its entries."""
    experiments = _experiments(args, device, blur_methods)
    return [
        *((title, lambda run=run: rows_to_entries(run())) for title, run in experiments),
        *_headline_measures(args),
    ]


def _experiments(
    args: argparse.Namespace,
    device: str,
    blur_methods: Mapping[str, Callable[..., Any]] | None,
) -> list[tuple[str, Callable[[], list[Row]]]]:
    """``(title, run)`` of chapters 12 and 13's experiments; ``run()`` returns their rows."""
    sizes = dict(QUICK_SIZES) if args.quick else default_sizes(device)
    common = {"device": device, "repeats": args.repeats, "progress": True}
    blurs = {"methods": blur_methods, "batch_size": sizes["batch_size"], **common}
    headline_sizes = list(dict.fromkeys([sizes["image_sizes"][1], sizes["image_sizes"][-1]]))
    one_size = {"image_size": sizes["image_size"], "batch_size": sizes["batch_size"]}
    return [
        (
            "blur as an op (py_function vs native)",
            lambda: blur_op(image_sizes=headline_sizes, **blurs),
        ),
        (
            "blur inside a model's forward pass",
            lambda: blur_in_model(image_sizes=headline_sizes, **blurs),
        ),
        (
            "blur in a tf.data pipeline",
            lambda: blur_pipeline(
                image_size=sizes["image_size"], examples=sizes["examples"], **blurs
            ),
        ),
        (
            "training step: eager vs tf.function vs XLA",
            lambda: training_step_modes(**one_size, **common),
        ),
        (
            "per-image loop vs vectorized_map vs batched op",
            lambda: per_example_vs_batched(
                batch_sizes=sizes["batch_sizes"][-1:], image_size=sizes["per_image_size"], **common
            ),
        ),
        (
            "compiled C++ blur vs OpenCV (chapter 13, CPU)",
            lambda: compiled_blur_vs_opencv(
                image_sizes=headline_sizes,
                batch_size=sizes["batch_size"],
                repeats=args.repeats,
                progress=True,
            ),
        ),
    ]


def _headline_measures(args: argparse.Namespace) -> list[tuple[str, Callable[[], list[Entry]]]]:
    """``(title, run)`` of chapters 7 and 9's headline measures; ``run()`` returns entries."""
    return [
        (
            "custom training loop vs model.fit (chapter 7's model, a small MLP)",
            lambda: [
                training_loop_vs_fit(
                    model=model, examples=args.examples, epochs=args.epochs, repeats=args.repeats
                )
                for model in LOOP_MODELS
            ],
        ),
        (
            "companion AdamW vs keras AdamW (chapter 9)",
            lambda: [adamw_step_time(repeats=args.repeats)],
        ),
    ]


def _report(entries: list[Entry], device: str, output: Path) -> None:
    """Print ``entries`` as a table and write them to the JSON file ``output``."""
    # The ratio first: the measures' names are long, and a narrow window should still show it.
    rows = [
        (
            f"{e['ratio']:.2f}",
            _number(e["custom_median"]),
            _number(e["reference_median"]),
            e["unit"],
            e["name"],
        )
        for e in entries
    ]
    print(f"device: {device}; ratio = custom / reference")
    print(format_table(rows, ["ratio", "custom", "reference", "unit", "measure"]))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps([dict(entry) for entry in entries], indent=2) + "\n")
    print(f"written to {output}")


def _number(value: float) -> str:
    """A table cell: thousands separators for large numbers, two decimals for small ones."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _flag(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type``: ``check(text)``, a TypeError or ValueError as argparse's error.

    The message loses its leading ``"<name>: "``: argparse says ``argument --flag:`` itself.
    """

    def parse(text: str) -> Any:
        try:
            return check(text)
        except (TypeError, ValueError) as error:
            raise argparse.ArgumentTypeError(str(error).split(": ", 1)[-1]) from error

    return parse


def _int_flag(flag: str, minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse ``type`` for an int flag in ``[minimum, maximum]`` (a word is reported as a
    str)."""

    def check(text: str) -> int:
        value = int(text) if text.strip().lstrip("+-").isdigit() else text
        return check_int(value, flag, minimum=minimum, maximum=maximum)

    return _flag(check)
