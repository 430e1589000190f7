"""One bad-input table per companion module (``CASES``, optional ``EXEMPT``); see ``tests/badinput.py``."""
