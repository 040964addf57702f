"""Measurement helpers shared by the benchmark runner and the work-precision sweep: logging
and formatting, machine facts, timed mbs runs and the heavy top's centre-of-mass error."""

from __future__ import annotations

import hashlib
import math
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

import mbs
from benchmarks import cases
from mbs.solvers import make_solver

#: End time of the centre-of-mass accuracy criterion (heavy top).
COM_T = 1.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fmt_time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


# -- machine ----------------------------------------------------------------------------------
def machine_info() -> dict:
    info = {"python": sys.version.split()[0], "platform": platform.platform(),
            "cores": os.cpu_count(), "numpy": np.__version__, "mbs": mbs.__version__}
    try:
        with open("/proc/cpuinfo") as handle:
            models = [line.split(":", 1)[1].strip() for line in handle
                      if line.startswith("model name")]
        info["cpu_model"] = models[0] if models else "?"
    except OSError:
        info["cpu_model"] = platform.processor() or "?"
    try:
        import scipy

        info["scipy"] = scipy.__version__
    except ImportError:
        info["scipy"] = None
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [{key: pool.get(key) for key in ("user_api", "internal_api", "version",
                                                        "num_threads", "threading_layer",
                                                        "architecture", "filepath")}
                        for pool in threadpool_info()]
    except Exception as exc:  # pragma: no cover - threadpoolctl is a dependency
        info["blas"] = f"unavailable: {exc}"
    try:
        config = np.show_config(mode="dicts")
        blas = config.get("Build Dependencies", {}).get("blas", {})
        info["numpy_blas_build"] = {key: blas.get(key) for key in ("name", "version",
                                                                   "openblas configuration")}
    except Exception as exc:
        info["numpy_blas_build"] = f"unavailable: {exc}"
    digest = hashlib.sha256()
    for source in sorted(Path(mbs.__file__).parent.rglob("*.py")):
        digest.update(source.read_bytes())
    info["mbs_source_sha256"] = digest.hexdigest()[:16]
    try:
        info["loadavg_start"] = os.getloadavg()
    except OSError:
        info["loadavg_start"] = None
    return info


def solver_spec(spec: str, **options) -> tuple[str, dict]:
    """(name, options) of a row label "name" or "name:backend" (e.g. "em:compiled") with
    further solver options (e.g. ``order=4``, ``stages=3``, ``tableau="gauss-2"``)."""
    name, _, backend = spec.partition(":")
    if backend:
        options["backend"] = backend
    return name, options


def solver_for(spec: str, **options) -> mbs.solvers.Solver:
    """A director solver from a row label and options (:func:`solver_spec`)."""
    name, options = solver_spec(spec, **options)
    return make_solver(name, **options)


def mbs_timed_run(model: mbs.Model, solver: str, t_end: float,
                  measure: Callable[[mbs.Solution], dict],
                  **options) -> Callable[[float], dict]:
    """Search callback: CPU time of an mbs run of length t_end and ``measure(solution)``.

    ``solver`` is a row label ("em", "em:compiled", or a Lie-group "vrkmk"), ``options``
    further solver options (:func:`solver_spec`); the CPU time (time.process_time) covers the
    ``mbs.simulate`` call only. A run that raises :class:`mbs.SolverError` gives
    ``"failure"``, any other exception ``"crash"``, both with ``"error": None``."""
    name, solver_options = solver_spec(solver, **options)

    def run(h: float) -> dict:
        steps = int(round(t_end / h))
        started = time.process_time()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                sol = mbs.simulate(model, name, h=h, t_end=t_end, **solver_options)
        except mbs.SolverError as exc:
            return {"cpu_s": time.process_time() - started, "steps": steps, "error": None,
                    "failed_step": exc.step,
                    "failure": f"step {exc.step}: {str(exc.__cause__ or exc)[:100]}"}
        except Exception as exc:
            return {"cpu_s": time.process_time() - started, "steps": steps, "error": None,
                    "crash": f"{type(exc).__name__}: {str(exc)[:160]}"}
        cpu = time.process_time() - started
        return {"cpu_s": cpu, "steps": steps,
                "newton_per_step": float(np.mean(sol.stats["newton_iterations"])),
                "refined_steps": len(sol.stats.get("refined_steps", ())),
                **measure(sol)}
    return run


def heavy_top_com_measure(sol: mbs.Solution) -> dict:
    """``{"error": |phi(T) - phi_exact(T)| / l}`` at the last time T = COM_T of ``sol``."""
    return {"error": cases.com_error(sol.body("top").position[-1], COM_T)}


def jsonable(value):
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
