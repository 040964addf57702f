"""What every scheme's step runs on: the step equations written as terms
(:mod:`mbs.engine.equations`), Newton's method with its stopping rules and factorisations
(:mod:`mbs.engine.newton`), the initial guess (:mod:`mbs.engine.guess`,
:mod:`mbs.engine.defects`) and the per-run caches (:mod:`mbs.engine.cache`).

The schemes (:mod:`mbs.solvers`) state their equations against this layer; the backends
(:mod:`mbs.backends`) evaluate them.
"""
