"""Evaluations of the schemes' step equations: the tensor form on numpy, dense
(:mod:`mbs.backends.polynomial`) and sparse (:mod:`mbs.backends.polynomial_sparse`), the
compiled numba kernel (:mod:`mbs.backends.compiled`, :mod:`mbs.backends.compiled_run`,
:mod:`mbs.backends.compiled_stages`) and the batched ensemble kernel
(:mod:`mbs.backends.ensemble_plan`, :mod:`mbs.backends.ensemble_numba`,
:mod:`mbs.backends.ensemble_rows`).

Each reads the one definition a scheme writes (:mod:`mbs.engine.equations`); the reference
evaluation through the model's own functions is :class:`mbs.engine.equations.ModelEquations`.
"""
