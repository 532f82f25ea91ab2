"""Theories built on the algebra: ``pdlt`` (Roberts & Yaida, the book's effective theory)."""
