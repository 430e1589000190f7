"""Synthetic multimodal data: OpenCV-drawn shapes plus a metadata vector.

The label needs both inputs: the image tells which shape was drawn, the metadata tells
which of two variants of that class it is. A model that sees only one input cannot beat
50% accuracy, which makes the dataset a small, honest test of multi-input models.

Backends: TensorFlow, JAX, PyTorch.
"""

from __future__ import annotations

import numpy as np

from companion._checks import check_int, check_seed, describe

SHAPE_NAMES = ("circle", "square", "triangle")
NUM_CLASSES = 2 * len(SHAPE_NAMES)
MIN_IMAGE_SIZE = 16
#: Largest values :func:`make_shapes` takes, and the most memory its float32 arrays may need.
MAX_EXAMPLES, MAX_IMAGE_SIZE, MAX_META_DIM = 10**6, 4096, 10**4
MAX_BYTES = 2**32


def class_name(label: int) -> str:
    """Human-readable name of a label of :func:`make_shapes`, e.g. ``'triangle/+'``.

    Raises:
        TypeError: If ``label`` is not an int (a NumPy integer from a label array is fine).
        ValueError: If ``label`` is not in ``range(NUM_CLASSES)``.

    Taught in chapter 4, "get_config: what a saved layer remembers".
    """
    label = check_int(label, "label", minimum=0, maximum=NUM_CLASSES - 1)
    return f"{SHAPE_NAMES[label // 2]}/{'+' if label % 2 else '-'}"


def _draw(shape: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Draw one anti-aliased shape in a random colour, size and position on a dark canvas."""
    import cv2

    canvas = np.zeros((size, size, 3), np.uint8)
    radius = rng.uniform(0.2, 0.35) * size
    cx, cy = rng.uniform(radius + 1, size - radius - 1, size=2)
    colour = tuple(int(c) for c in rng.integers(120, 256, size=3))
    if shape == 0:
        cv2.circle(canvas, (round(cx), round(cy)), round(radius), colour, -1, cv2.LINE_AA)
    elif shape == 1:
        half = radius * 0.85
        corners = np.array(
            [
                [cx - half, cy - half],
                [cx + half, cy - half],
                [cx + half, cy + half],
                [cx - half, cy + half],
            ]
        )
        cv2.fillPoly(canvas, [np.round(corners).astype(np.int32)], colour, cv2.LINE_AA)
    else:
        angles = rng.uniform(0, 2 * np.pi) + np.array([0.0, 2 * np.pi / 3, 4 * np.pi / 3])
        corners = np.stack([cx + radius * np.cos(angles), cy + radius * np.sin(angles)], axis=1)
        cv2.fillPoly(canvas, [np.round(corners).astype(np.int32)], colour, cv2.LINE_AA)
    return canvas


def _check_memory(n: int, image_size: int, meta_dim: int) -> None:
    """Refuse ``n`` examples whose float32 arrays would need more than ``MAX_BYTES``."""
    largest = MAX_BYTES // (4 * (3 * image_size**2 + meta_dim))
    if n > largest:
        raise ValueError(
            f"n: expected an int >= 1 and <= {largest} for image_size={image_size}, "
            f"meta_dim={meta_dim}"
            f" (at most {MAX_BYTES // 2**30} GiB of float32 arrays), got {describe(n)}"
        )


def make_shapes(
    n: int, image_size: int = 32, meta_dim: int = 10, seed: int = 0
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """Make ``n`` labelled examples of (shape image, metadata vector).

    Each image holds one filled circle, square or triangle (random colour, size, position,
    rotation) drawn with OpenCV, plus a little Gaussian noise. The metadata is standard
    normal; its sign (the sum over its entries) picks the variant. The label is
    ``2 * shape + (meta.sum() > 0)``, so it takes both inputs to predict.

    Args:
        n: Number of examples, in ``[1, MAX_EXAMPLES]``, and few enough that the arrays fit in
            ``MAX_BYTES`` (4 GiB).
        image_size: Height and width of the square images in pixels, in ``[16, MAX_IMAGE_SIZE]``.
        meta_dim: Length of the metadata vector, in ``[1, MAX_META_DIM]``.
        seed: Seed of the NumPy generator, in ``[0, 2**32 - 1]``; the same seed gives the
            same arrays.

    Returns:
        ``((images, meta), labels)``: images ``float32`` of shape ``(n, image_size,
        image_size, 3)`` in [0, 1], meta ``float32`` of shape ``(n, meta_dim)``, labels
        ``int32`` of shape ``(n,)`` in ``range(NUM_CLASSES)``.

    Raises:
        TypeError: If an argument is not an int.
        ValueError: If an argument is out of its range or the arrays would not fit in ``MAX_BYTES``.

    Example:
        >>> (images, meta), labels = make_shapes(8, image_size=32, meta_dim=4, seed=1)
        >>> images.shape, meta.shape, labels.shape
        ((8, 32, 32, 3), (8, 4), (8,))

    Taught in chapter 1, "Models: a graph of layers".
    """
    n = check_int(n, "n", minimum=1, maximum=MAX_EXAMPLES)
    image_size = check_int(image_size, "image_size", minimum=MIN_IMAGE_SIZE, maximum=MAX_IMAGE_SIZE)
    meta_dim = check_int(meta_dim, "meta_dim", minimum=1, maximum=MAX_META_DIM)
    seed = check_seed(seed)
    _check_memory(n, image_size, meta_dim)

    rng = np.random.default_rng(seed)
    shapes = rng.integers(0, len(SHAPE_NAMES), size=n)
    images = np.stack([_draw(int(s), image_size, rng) for s in shapes]).astype(np.float32) / 255.0
    images += rng.normal(0.0, 0.03, size=images.shape).astype(np.float32)
    np.clip(images, 0.0, 1.0, out=images)
    meta = rng.standard_normal((n, meta_dim)).astype(np.float32)
    variant = (meta.sum(axis=1) > 0).astype(np.int32)
    labels = (2 * shapes + variant).astype(np.int32)
    return (images, meta), labels
