"""mixer's version, a leaf: any layer reads it without importing the package root's names
(pyproject reads it here too)."""

__version__ = "0.2.0"
