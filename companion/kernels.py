"""The Gaussian blur as a compiled C++ TensorFlow op: build, load, gradient, Keras layer.

Beyond the four paths of chapters 2-5: ``_kernels/blur_op.cc`` (shipped inside the package)
defines the ops ``GaussianBlur`` and ``GaussianBlurGrad`` (its adjoint) with CPU kernels.
``build_blur_op`` compiles it with the system C++ compiler against the installed TensorFlow's
headers (``tf.sysconfig``) into a per-user cache, keyed by the TensorFlow version, the
compiler, the flags and the source, so each stack builds once and later processes reuse the
library. Next to each library a ``manifest.json`` records what it was built from and with (and
the library's size and SHA-256, checked before the library is used: a truncated or damaged one
is rebuilt, never loaded); a process that cannot run the compiler (a serving image has none)
loads an intact cached build whose manifest matches its TensorFlow, source and flags.
``load_blur_op`` loads it (``tf.load_op_library``) and registers the gradient; ``cpp_blur``
and the ``CppGaussianBlur`` layer use it and compute what ``cv2.GaussianBlur`` and
``companion.pyfunc.native_blur`` compute.

Environment variables:
    ``WHITE_BOX_TF_CXX``: the C++ compiler (default ``g++``).
    ``WHITE_BOX_TF_CACHE``: the cache folder (default ``$XDG_CACHE_HOME/white-box-tf/kernels``,
    else ``~/.cache/white-box-tf/kernels``).

``python -m companion.kernels`` builds the library ahead of time and prints where it is.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from companion._checks import check_choice, check_path, check_str, float_tensor
from companion.pyfunc import GaussianBlur, check_ksize, check_sigma, gaussian_kernel

#: The C++ source of the ops, inside the installed package.
SOURCE = Path(__file__).with_name("_kernels") / "blur_op.cc"
#: The compiler flags added to TensorFlow's own. They make a shared library optimised for any
#: x86-64/ARM CPU (no ``-march=native``: a library built on one machine may run on another with the
#: same cache), with the compiler's warnings on; ``build_command`` passes TensorFlow's include
#: folder as ``-isystem``, which silences the warnings of its headers but not of our source.
BUILD_FLAGS = ("-std=c++17", "-shared", "-fPIC", "-O3", "-Wall", "-Wextra")
#: The files of one build, in ``<cache>/<build_key>/``. The manifest is written last: a folder
#: without it holds no complete build.
LIBRARY, MANIFEST = "blur_op.so", "manifest.json"
#: Op names registered by the library (and the gradient registered for each).
OP_NAMES = ("GaussianBlur", "GaussianBlurGrad")


class BuildError(RuntimeError):
    """The op library could not be built: no compiler, no TensorFlow headers, a compile error, or a
    cache folder that cannot hold the build."""


def cache_root() -> Path:
    """The folder that holds one subfolder per build key (see the module docstring)."""
    if os.environ.get("WHITE_BOX_TF_CACHE"):
        return Path(os.environ["WHITE_BOX_TF_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "white-box-tf" / "kernels"


def compiler() -> str:
    """The C++ compiler to use: ``$WHITE_BOX_TF_CXX``, else ``g++``."""
    return os.environ.get("WHITE_BOX_TF_CXX") or "g++"


def tensorflow_flags() -> tuple[list[str], list[str]]:
    """TensorFlow's compile flags (include folder, ABI, C++ standard) and link flags."""
    return tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()


def _checked_compiler(cxx: Any) -> str:
    """``cxx`` if it is a non-empty str, ``compiler()`` for None; else the project's error."""
    return (
        compiler()
        if cxx is None
        else check_str(cxx, "cxx", "a C++ compiler (a non-empty str) or None")
    )


def build_command(source: Path | str, output: Path | str, cxx: str | None = None) -> list[str]:
    """The compiler command line that turns ``source`` into the shared library ``output``.

    TensorFlow's include folders (``-I`` in ``tf.sysconfig``) become ``-isystem`` folders: the
    compiler then reports warnings in our source only, not in TensorFlow's headers.

    Raises:
        TypeError, ValueError: If ``source`` or ``output`` is not a non-empty path, or ``cxx``
            not a non-empty str or None.

    Example:
        >>> build_command("blur_op.cc", "blur_op.so", "g++")[:7]
        ['g++', '-std=c++17', '-shared', '-fPIC', '-O3', '-Wall', '-Wextra']
    """
    source, output, cxx = (
        check_path(source, "source"),
        check_path(output, "output"),
        _checked_compiler(cxx),
    )
    return [cxx, *BUILD_FLAGS, str(source), "-o", str(output), *_tensorflow_build_flags()]


def _tensorflow_build_flags() -> list[str]:
    """``tensorflow_flags()`` as the compiler gets them: ``-I<folder>`` as ``-isystem <folder>``."""
    compile_flags, link_flags = tensorflow_flags()
    system_includes = [
        part
        for flag in compile_flags
        for part in (["-isystem", flag[2:]] if flag.startswith("-I") else [flag])
    ]
    return [*system_includes, *link_flags]


def _compiler_version(cxx: str) -> str:
    """First line of ``cxx --version``; BuildError naming the compiler when it cannot run."""
    path = shutil.which(cxx)
    if path is None:
        raise BuildError(
            f"compiler: expected a C++ compiler on PATH, got str {cxx!r}, which is not found; "
            "install g++ (Debian/Ubuntu/Colab: apt-get install g++) or set WHITE_BOX_TF_CXX to "
            "a compiler"
        )
    result = _run([path, "--version"], timeout=60)
    if result.returncode != 0:
        raise BuildError(
            f"compiler: {cxx!r} --version failed (exit {result.returncode}): "
            f"{result.stderr.strip()[:300] or 'no message'}"
        )
    return result.stdout.splitlines()[0] if result.stdout else path


def _run(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``command``; BuildError when it cannot start or does not finish in ``timeout`` s."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildError(
            f"{command[0]} did not finish in {timeout:.0f} s: {' '.join(command)[:300]}"
        ) from None
    except OSError as error:
        raise BuildError(f"{command[0]} cannot run ({type(error).__name__}: {error})") from error


def _check_headers(compile_flags: list[str]) -> None:
    """BuildError when TensorFlow's C++ headers are not where ``tf.sysconfig`` says they are."""
    includes = [flag[2:] for flag in compile_flags if flag.startswith("-I")]
    if not any((Path(folder) / "tensorflow/core/framework/op.h").is_file() for folder in includes):
        raise BuildError(
            f"TensorFlow's C++ headers: expected tensorflow/core/framework/op.h under {includes}, "
            "got no such file; reinstall a TensorFlow wheel (it ships the headers)"
        )


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _toolchain_free_identity() -> dict[str, Any]:
    """What a build depends on apart from the compiler: TensorFlow, platform, flags, source."""
    return {
        "tensorflow": tf.__version__,
        "platform": sys.platform,
        "flags": [*BUILD_FLAGS, *_tensorflow_build_flags()],
        "source_sha256": _sha256(SOURCE),
    }


def _identity(cxx: str) -> dict[str, Any]:
    """What a build depends on: ``_toolchain_free_identity`` and the compiler's version line."""
    return {**_toolchain_free_identity(), "compiler": _compiler_version(cxx)}


def _key(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def build_key(cxx: str | None = None) -> str:
    """Hex digest of what the library depends on: TensorFlow, compiler, flags and source.

    Raises:
        TypeError, ValueError: If ``cxx`` is not a non-empty str or None.
        BuildError: If the compiler cannot be run (its version is part of the key).
    """
    return _key(_identity(_checked_compiler(cxx)))


def _matching_build(root: Path) -> Path | None:
    """The newest complete build under ``root`` for this TensorFlow, platform, flags and source,
    whichever compiler made it (what a process without a compiler can load), or None."""
    wanted = _toolchain_free_identity()
    found = []
    for manifest_path in root.glob(f"*/{MANIFEST}"):
        manifest = _verified_manifest(manifest_path.parent)
        if manifest is not None and all(manifest.get(k) == v for k, v in wanted.items()):
            found.append((manifest_path.stat().st_mtime, str(manifest_path.parent / LIBRARY)))
    return Path(max(found)[1]) if found else None


def _verified_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of the build in ``folder`` if its library is the file it records (same size and
    SHA-256), else None: a library truncated, damaged or replaced since is not loaded (a truncated
    library can kill the process with SIGBUS when TensorFlow maps it)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        recorded = manifest["library"]
        library = folder / LIBRARY
        intact = (
            library.stat().st_size == recorded["size"] and _sha256(library) == recorded["sha256"]
        )
    except (OSError, ValueError, KeyError, TypeError):  # missing, unreadable or not a manifest
        return None
    return manifest if intact else None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder/.lock`` (other processes building the same key wait)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic os.replace below still keeps the cache consistent
        yield
        return
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _compile(command: list[str], output: Path) -> str:
    """Run the compiler and return what it printed (warnings); BuildError with its last lines of
    output when it fails."""
    result = _run(command, timeout=600)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        raise BuildError(
            f"compiling {SOURCE.name} failed (exit {result.returncode}):\n"
            f"{' '.join(command)}\n{tail}"
        )
    if not output.is_file() or output.stat().st_size == 0:
        raise BuildError(
            f"compiling {SOURCE.name} with {command[0]!r} exited 0 but wrote no library to "
            f"{output}: is {command[0]!r} a C++ compiler?"
        )
    return result.stdout + result.stderr


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def build_blur_op(*, cache_dir: Path | str | None = None, cxx: str | None = None) -> Path:
    """Compile ``blur_op.cc`` into the cache unless it is already there; return the library's path.

    A cached library is used only if it is the file its manifest records (size and SHA-256): a
    truncated or damaged one is rebuilt. Safe when several processes build at once (tests and
    notebooks run in parallel): a file lock lets one compile while the others wait, and the
    library and then its manifest are written to temporary files and renamed into place, so
    nobody ever loads half a file. The manifest (``manifest.json``) records the TensorFlow
    version, platform, flags, source SHA-256, compiler, the compiler's output and the library's
    name, size and SHA-256.

    When the compiler cannot be run (none installed, as in a serving image), an intact cached
    build made for this TensorFlow, platform, flags and source by any compiler is used instead.

    Args:
        cache_dir: Root of the cache (default ``cache_root()``); the library goes to
            ``<cache_dir>/<build_key>/blur_op.so``.
        cxx: The C++ compiler (default ``compiler()``).

    Returns:
        The path of the shared library.

    Raises:
        TypeError, ValueError: If ``cache_dir`` is not a non-empty path or None, or ``cxx`` not a
            non-empty str or None (``''`` is not "the current folder" nor "the default").
        BuildError: If the compiler is missing and no intact cached build matches, TensorFlow's
            headers are missing, the compilation fails, or the cache is not a folder or cannot be
            written (the message says which, and what to do).

    Example:
        >>> build_blur_op().name
        'blur_op.so'
    """
    cxx = _checked_compiler(cxx)
    root = cache_root() if cache_dir is None else check_path(cache_dir, "cache_dir").expanduser()
    if os.path.exists(root) and not os.path.isdir(root):  # (a path it cannot stat: mkdir says why)
        raise BuildError(f"cache_dir: expected a folder, got the file {root}")
    try:
        identity = _identity(cxx)
    except BuildError as no_compiler:
        cached = _matching_build(root)
        if cached is None:
            raise BuildError(
                f"{no_compiler}; and no intact cached build in {root} matches TensorFlow "
                f"{tf.__version__}, this source and these flags (copy a cache built with them, or "
                "set WHITE_BOX_TF_CACHE)"
            ) from None
        return cached
    folder = root / _key(identity)
    if _verified_manifest(folder) is None:
        _check_headers(tensorflow_flags()[0])
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with _locked(folder):
                # another process may have built it meanwhile
                if _verified_manifest(folder) is None:
                    _build_into(folder, cxx, identity)
        except OSError as error:
            raise BuildError(
                f"cache: cannot write the build to {folder} "
                f"({type(error).__name__}: {error.strerror or error}); "
                "pass cache_dir= or set WHITE_BOX_TF_CACHE to a writable folder"
            ) from error
    return folder / LIBRARY


def _build_into(folder: Path, cxx: str, identity: dict[str, Any]) -> None:
    """Compile into ``folder`` (its lock held): the library, then its manifest, each written to a
    temporary file and renamed into place. Temporary files left by a process that died while
    holding the lock are removed first."""
    for stale in folder.glob("*.tmp*"):
        stale.unlink(missing_ok=True)
    partial = folder / f"blur_op.{os.getpid()}.tmp.so"
    try:
        output = _compile(build_command(SOURCE, partial, cxx), partial)
        built = {"name": LIBRARY, "size": partial.stat().st_size, "sha256": _sha256(partial)}
        os.replace(partial, folder / LIBRARY)
    finally:
        partial.unlink(missing_ok=True)
    record = {**identity, "compiler_output": output, "library": built}
    _write_atomically(folder / MANIFEST, json.dumps(record, indent=1, sort_keys=True) + "\n")


@functools.cache
def load_blur_op() -> Any:
    """Build (if needed) and load the op library once per process; register its gradients.

    Returns:
        The module ``tf.load_op_library`` returns, with the generated Python wrappers
        ``gaussian_blur(images, kernel)`` and ``gaussian_blur_grad(upstream, kernel)``.

    Raises:
        BuildError: As ``build_blur_op``, or if TensorFlow cannot load the library (not cached: a
            later call tries again).

    Example:
        >>> op = load_blur_op()
        >>> op.gaussian_blur(tf.ones([1, 4, 4, 1]), tf.constant([0.25, 0.5, 0.25])).shape
        TensorShape([1, 4, 4, 1])
    """
    library = build_blur_op()
    try:
        module = tf.load_op_library(str(library))
    except tf.errors.NotFoundError as error:  # intact as built, yet unloadable: not a library
        raise BuildError(
            f"{library}: TensorFlow cannot load it ({error.message.strip()[:300]}); delete "
            f"{library.parent} to rebuild it, or check the compiler"
        ) from None
    if not hasattr(module, "gaussian_blur_grad"):  # TensorFlow kept the ops registered first
        raise BuildError(
            f"{library}: its ops {OP_NAMES} are already registered in this process by another "
            "library (a hand-built blur_op.so?); load only one, e.g. in a fresh process"
        )
    _register_gradients(module)
    return module


def _register_gradients(module: Any) -> None:
    """The gradient of each op is the other op: the blur and its adjoint transpose each
    other."""
    adjoint = {
        "GaussianBlur": module.gaussian_blur_grad,
        "GaussianBlurGrad": module.gaussian_blur,
    }
    for name, transpose in adjoint.items():

        def gradient(
            op: tf.Operation, upstream: tf.Tensor, transpose: Any = transpose
        ) -> list[Any]:
            # no gradient for the kernel weights
            return [transpose(upstream, op.inputs[1]), None]

        try:
            tf.RegisterGradient(name)(gradient)
        except KeyError:  # registered already (the module was imported twice)
            pass


#: The image dtypes ``cpp_blur`` takes -> the dtype the op computes in. The op's kernels are
#: float32/float64; half-precision images are blurred in float32 (see ``cpp_blur``).
_COMPUTE_DTYPES = {
    tf.float16: tf.float32,
    tf.bfloat16: tf.float32,
    tf.float32: tf.float32,
    tf.float64: tf.float64,
}


@functools.lru_cache(maxsize=64)
def _weights(ksize: int, sigma: float) -> Any:
    """``gaussian_kernel(ksize, sigma)``, computed once per (ksize, sigma) and read-only."""
    weights = gaussian_kernel(ksize, sigma)
    weights.flags.writeable = False
    return weights


@functools.lru_cache(maxsize=64)
def _eager_weights(ksize: int, sigma: float, dtype: tf.DType) -> tf.Tensor:
    """The weights as an eager constant in host memory, built once per (ksize, sigma, dtype)."""
    with tf.device("/CPU:0"):  # where the op's kernels run: no copy per call
        return tf.constant(_weights(ksize, sigma), dtype)


def _kernel_tensor(ksize: int, sigma: float, dtype: tf.DType) -> tf.Tensor:
    """The op's ``kernel`` input. Eager constants are cached; a graph (``tf.function``,
    ``tf.data``) gets a constant of its own, since a tensor from one graph cannot enter another."""
    if tf.executing_eagerly():
        return _eager_weights(ksize, sigma, dtype)
    return tf.constant(_weights(ksize, sigma), dtype)


def _check_images(dtype: tf.DType, shape: tf.TensorShape, name: str, ksize: int) -> None:
    """The project's error, naming ``name``, unless images of ``dtype`` and ``shape`` can be blurred
    with ``ksize`` (unknown dimensions pass: the op checks them when it runs)."""
    if dtype not in _COMPUTE_DTYPES:
        raise TypeError(
            f"{name}: expected dtype float16, bfloat16, float32 or float64 (cast other images "
            f"first), got dtype {dtype.name}"
        )
    if shape.rank not in (3, 4):
        raise ValueError(f"{name}: expected rank 3 (H, W, C) or 4 (N, H, W, C), got shape {shape}")
    if any(d is not None and d <= ksize // 2 for d in tuple(shape)[-3:-1]):
        raise ValueError(
            f"{name}: expected height and width > ksize // 2 = {ksize // 2} for reflect "
            f"padding, got shape {shape}"
        )


def _images_tensor(images: Any, name: str, ksize: int) -> tf.Tensor:
    """``images`` as a tensor, checked by ``_check_images``."""
    tensor = float_tensor(images, name)
    _check_images(tensor.dtype, tensor.shape, name, ksize)
    return tensor


def cpp_blur(images: Any, ksize: int = 5, sigma: float = 0.0) -> tf.Tensor:
    """Gaussian blur with the compiled ``GaussianBlur`` op, equal to ``cv2.GaussianBlur``.

    Same kernel (``companion.pyfunc.gaussian_kernel``, passed to the op as a tensor) and border
    (``BORDER_REFLECT_101``) as OpenCV and ``native_blur``. Works eagerly, in ``tf.function``,
    in ``tf.data`` and in Keras layers (also under the ``mixed_float16`` policy), on the CPU;
    differentiable (the gradient is the ``GaussianBlurGrad`` op). The first call in a process
    loads the library (``load_blur_op``), compiling it if this TensorFlow has no cached build
    yet. Each call does little Python work: the kernel weights are computed once per
    ``(ksize, sigma)`` and, when executing eagerly, kept as a tensor.

    ``float16`` and ``bfloat16`` images are cast to ``float32``, blurred and cast back, rather
    than blurred by half-precision kernels: the sums of ``ksize**2`` products then round once,
    at the end, instead of at every step (float16 keeps 11 bits, bfloat16 8), a CPU computes
    half-precision arithmetic in float32 anyway, and the casts' gradient is automatic.

    Args:
        images: Float tensor or array ``(H, W, C)`` or a batch ``(N, H, W, C)``, dtype
            float16, bfloat16, float32 or float64; height and width must exceed ``ksize // 2``.
        ksize: Kernel size, a positive odd int.
        sigma: Standard deviation, >= 0 (0 = OpenCV's rule).

    Returns:
        The blurred tensor, same shape and dtype as ``images``.

    Raises:
        TypeError: If ``images`` is not a float tensor or array of those dtypes, or ``ksize`` /
            ``sigma`` have the wrong type.
        ValueError: If the rank is not 3 or 4, the image is smaller than ``ksize // 2 + 1``
            pixels, or ``ksize`` / ``sigma`` are out of range.
        BuildError: If the op library cannot be built.

    Example:
        >>> import numpy as np
        >>> cpp_blur(np.ones((1, 8, 8, 3), np.float32)).shape
        TensorShape([1, 8, 8, 3])
        >>> cpp_blur(np.ones((8, 8, 3), np.float16)).dtype
        tf.float16
    """
    ksize, sigma = check_ksize(ksize), check_sigma(sigma)
    images = _images_tensor(images, "images", ksize)
    dtype, rank = images.dtype, images.shape.rank
    compute_dtype = _COMPUTE_DTYPES[dtype]
    half = compute_dtype != dtype
    batch = images if rank == 4 else tf.expand_dims(images, 0)
    if half:
        batch = tf.cast(batch, compute_dtype)
    blurred = load_blur_op().gaussian_blur(batch, _kernel_tensor(ksize, sigma, compute_dtype))
    if half:
        blurred = tf.cast(blurred, dtype)
    return blurred if rank == 4 else tf.squeeze(blurred, 0)


@keras.saving.register_keras_serializable(package="companion")
class CppGaussianBlur(GaussianBlur):
    """Keras layer that blurs NHWC images with the compiled op (``cpp_blur``; no weights).

    ``companion.pyfunc.GaussianBlur`` with another blur: same arguments, checks and config.
    Saves to ``.keras`` like any registered layer (loading imports ``companion.kernels``, which
    loads the library). A SavedModel exported from a model with this layer contains the
    ``GaussianBlur`` op: the process that serves it must call ``load_blur_op()`` (or
    ``tf.load_op_library`` on the library) before loading it, and TFLite cannot run it.

    The layer sets ``supports_jit = False``: the op has no XLA kernel, and ``compile()``'s
    default ``jit_compile="auto"`` turns XLA on whenever a GPU is visible unless some layer
    says so; ``fit`` would then fail (``No registered 'GaussianBlur' OpKernel for XLA_GPU_JIT
    devices``). Under ``mixed_float16`` it blurs float16 inputs in float32 (see ``cpp_blur``).

    Args:
        ksize: Kernel size, a positive odd int.
        sigma: Standard deviation, >= 0 (0 = OpenCV's rule).
        **kwargs: Base layer arguments (``name``, ``dtype``, ...).

    Raises:
        TypeError, ValueError: As ``cpp_blur``, at construction for ``ksize`` / ``sigma``
            and at call time for the images (named ``inputs``).

    Example:
        >>> import numpy as np
        >>> layer = CppGaussianBlur(ksize=3)
        >>> layer(np.ones((2, 8, 8, 3), np.float32)).shape, layer.supports_jit
        (TensorShape([2, 8, 8, 3]), False)
    """

    def __init__(self, ksize: int = 5, sigma: float = 0.0, **kwargs: Any) -> None:
        super().__init__(ksize, sigma, **kwargs)
        self.supports_jit = False  # keeps model.compile()'s jit_compile="auto" off XLA

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """Check ``inputs`` before Keras converts them (its errors would not name them)."""
        if isinstance(inputs, keras.KerasTensor):  # a functional model's symbolic input
            _check_images(
                tf.as_dtype(inputs.dtype), tf.TensorShape(inputs.shape), "inputs", self.ksize
            )
        else:
            inputs = _images_tensor(inputs, "inputs", self.ksize)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return cpp_blur(inputs, self.ksize, self.sigma)


def source_section(name: str) -> str:
    """The part of ``blur_op.cc`` under the marker ``// ==== name ====`` (up to the next marker).

    Raises:
        TypeError, ValueError: If ``name`` is not the name of a section (the message lists them).

    Example:
        >>> 'REGISTER_OP("GaussianBlur")' in source_section("registration")
        True
    """
    sections = re.split(r"^// ==== (.+?) ====\n", SOURCE.read_text(), flags=re.MULTILINE)
    found = dict(zip(sections[1::2], sections[2::2]))
    check_choice(name, "name", tuple(found))
    return "// ==== " + name + " ====\n" + found[name].strip("\n")


def main() -> int:
    """``python -m companion.kernels``: build the library now (``make`` runs it), say where it is.

    Returns:
        The exit status, 0, or 1 after printing why the build failed (no traceback).
    """
    started, start = time.time(), time.perf_counter()
    try:
        library = build_blur_op()
    except BuildError as error:
        print(f"companion.kernels: {error}", file=sys.stderr)
        return 1
    fresh = library.stat().st_mtime >= started  # written by this call
    how = f"compiled in {time.perf_counter() - start:.1f} s" if fresh else "cached"
    print(f"GaussianBlur op for TensorFlow {tf.__version__}: {library} ({how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
