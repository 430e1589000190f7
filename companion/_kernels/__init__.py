"""The build system of the compiled blur: compiler, flags, cache keys, manifests and a file lock.

``blur_op.cc``, beside this file, defines the ops ``GaussianBlur`` and ``GaussianBlurGrad``.
``build_blur_op`` compiles it with the system C++ compiler against the installed TensorFlow's
headers (``tf.sysconfig``) into a per-user cache, keyed by the TensorFlow version, the
compiler, the flags and the source, so each stack builds once and later processes reuse the
library. Next to each library a ``manifest.json`` records what it was built from and with (and
the library's size and SHA-256, checked before the library is used: a truncated or damaged one
is rebuilt, never loaded); a process that cannot run the compiler (a serving image has none)
loads an intact cached build whose manifest matches its TensorFlow, source and flags.
``companion.kernels`` loads the library, registers the gradient and re-exports these names.

Environment variables:
    ``WHITE_BOX_TF_CXX``: the C++ compiler (default ``g++``).
    ``WHITE_BOX_TF_CACHE``: the cache folder (default ``$XDG_CACHE_HOME/white-box-tf/kernels``,
    else ``~/.cache/white-box-tf/kernels``).

Backends: TensorFlow only (on JAX use the XLA FFI or Pallas; on PyTorch use a torch.library op).
"""

from __future__ import annotations

import contextlib
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

from companion._backend import require_tensorflow

require_tensorflow(
    "companion._kernels",
    {
        "jax": "a C++ function through the XLA FFI (jax.ffi), or Pallas (interpret=True on a CPU)",
        "torch": "a torch.library op built by torch.utils.cpp_extension (it caches its build)",
    },
)


import tensorflow as tf  # noqa: E402

from companion._cache import cache_root  # noqa: E402
from companion._checks import check_choice, check_path, check_str  # noqa: E402

#: The C++ source of the ops, inside the installed package.
SOURCE = Path(__file__).with_name("blur_op.cc")
#: The compiler flags added to TensorFlow's own. They make a shared library optimised for any
#: x86-64/ARM CPU (no ``-march=native``: a library built on one machine may run on another with the
#: same cache), with the compiler's warnings on; ``build_command`` passes TensorFlow's include
#: folder as ``-isystem``, which silences the warnings of its headers but not of our source.
BUILD_FLAGS = ("-std=c++17", "-shared", "-fPIC", "-O3", "-Wall", "-Wextra")
#: The files of one build, in ``<cache>/<build_key>/``. The manifest is written last: a folder
#: without it holds no complete build.
LIBRARY, MANIFEST = "blur_op.so", "manifest.json"


class BuildError(RuntimeError):
    """The op library could not be built: no compiler, no TensorFlow headers, a compile error, or a
    cache folder that cannot hold the build.

    Taught in chapter 13, "The build cache and its manifest".
    """


def compiler() -> str:
    """The C++ compiler to use: ``$WHITE_BOX_TF_CXX``, else ``g++``.

    Taught in chapter 13, "Building it: the compiler command".
    """
    return os.environ.get("WHITE_BOX_TF_CXX") or "g++"


def tensorflow_flags() -> tuple[list[str], list[str]]:
    """TensorFlow's compile flags (include folder, ABI, C++ standard) and link flags.

    Taught in chapter 13, "Building it: the compiler command".
    """
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

    Taught in chapter 13, "Building it: the compiler command".
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

    Taught in chapter 13, "The build cache and its manifest".
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

    Taught in chapter 13, "The build cache and its manifest".
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


def source_section(name: str) -> str:
    """The part of ``blur_op.cc`` under the marker ``// ==== name ====`` (up to the next marker).

    Raises:
        TypeError, ValueError: If ``name`` is not the name of a section (the message lists them).

    Example:
        >>> 'REGISTER_OP("GaussianBlur")' in source_section("registration")
        True

    Taught in chapter 13, "The anatomy of an op".
    """
    sections = re.split(r"^// ==== (.+?) ====\n", SOURCE.read_text(), flags=re.MULTILINE)
    found = dict(zip(sections[1::2], sections[2::2]))
    check_choice(name, "name", tuple(found))
    return "// ==== " + name + " ====\n" + found[name].strip("\n")


def main() -> int:
    """``python -m companion.kernels``: build the library now (``make`` runs it), say where it is.

    Returns:
        The exit status, 0, or 1 after printing why the build failed (no traceback).

    Taught in chapter 13, "The build cache and its manifest".
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
