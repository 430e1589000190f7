"""``python -m companion.bench``: the headline benchmarks (``make bench``)."""

from companion.bench._cli import main

if __name__ == "__main__":
    main()
