#!/usr/bin/env bash
# Print the path of a Python interpreter of version $1 (e.g. 3.13): python3.13 on PATH, else a
# pyenv installation of it. Exit 1 with a message naming what to install when there is none.
set -u
version=${1:?usage: find_python.sh MAJOR.MINOR}
if command -v "python$version" >/dev/null 2>&1 && "python$version" -c "" 2>/dev/null; then
  command -v "python$version"
  exit 0
fi
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
candidate=$(ls -d "$root"/versions/"$version"*/bin/"python$version" 2>/dev/null | sort -V | tail -n 1)
if [ -n "$candidate" ] && "$candidate" -c "" 2>/dev/null; then
  echo "$candidate"
  exit 0
fi
echo "find_python.sh: no Python $version found (neither python$version on PATH nor a pyenv $version.x); install one, or run make with COLAB_PYTHON=/path/to/python$version" >&2
exit 1
