"""Tolerances for comparing float32 scores: the results of float32 arithmetic differ between
machines (BLAS kernels, summation order) by a few units in the 7th significant digit, so
pytest.approx's default relative 1e-6 is too tight for them."""

F32_REL = 1e-5
F32_ABS = 1e-6
