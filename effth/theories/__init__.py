"""Theories built on the algebra: ``pdlt`` (Roberts & Yaida, the book's effective theory) and
``dmft`` (Bordelon & Pehlevan, dynamical mean-field theory of feature learning)."""
