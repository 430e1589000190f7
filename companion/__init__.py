"""Companion package of *White-Box TensorFlow*.

One module per chapter of the book, imported on demand so that ``import companion``
stays cheap and never imports TensorFlow by itself::

    from companion.notebook import setup        # every chapter's first cell
    from companion.data import make_shapes      # the synthetic dataset
    from companion.introspection import traced_ops, weights_table   # chapter 1
"""

__version__ = "0.1.0"
