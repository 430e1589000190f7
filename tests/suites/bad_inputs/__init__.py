"""One bad-input table per companion module (``CASES``, optional ``EXEMPT``).

The engine that runs them is ``tests/helpers/badinput.py``.
"""
