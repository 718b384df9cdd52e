"""Tuning of score weights on training queries (grid search, k-fold CV): FUQ, modalities."""
