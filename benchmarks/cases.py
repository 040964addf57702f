"""Benchmark models and their timing settings.

Each case builds an uncompiled :class:`mbs.System` from the examples (or from
:func:`benchmarks.chain_compile.build_chain`) and says which step size, how many steps per timed
run and which solvers the runner uses for it. The heavy top's exact steady precession (seed 003,
section 6.2) is here too, for the accuracy-vs-cost rows:

    R(t) = R_z(w_p t) R0 R_z(w_s t),  centre of mass phi(t) = l d3(t) = l R(t) e3.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import mbs
from benchmarks.chain_compile import build_chain

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example(name: str):
    """Import ``examples/<name>.py`` (the examples folder is not a package)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


# -- model builders ---------------------------------------------------------------------------
def heavy_top() -> mbs.System:
    """Heavy top in steady precession (examples/heavy_top.py)."""
    return example("heavy_top").build()


def four_particle() -> mbs.System:
    """Four particles, two quartic springs, two rigid distances (examples/four_particle.py)."""
    return example("four_particle").build()


def double_pendulum() -> mbs.System:
    """Two rigid links on revolute joints under gravity (examples/double_pendulum.py)."""
    return example("double_pendulum").build()


def four_bar() -> mbs.System:
    """Closed-loop planar four-bar linkage (examples/four_bar.py)."""
    return example("four_bar").build()


def chain(n_links: int) -> mbs.System:
    """N slender boxes hanging from the ground by spherical joints under gravity."""
    return build_chain(n_links)


# -- cases ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One benchmark model with its timing settings.

    ``steps`` steps are integrated per timed run, ``repeats`` timed runs are made after one
    untimed warm-up run of ``warm_steps`` steps; the per-step time is the median over the
    repeats of (wall time of the run) / steps.
    """

    name: str
    label: str
    build: Callable[[], mbs.System]
    h: float
    steps: int
    repeats: int
    solvers: tuple[str, ...]
    warm_steps: int = 5
    n_links: int | None = None


HEAVY_TOP_SOLVERS = ("em", "ggl-vi-a", "ggl-vi-s", "rattle", "hbvm", "em:compiled",
                     "ggl-vi-a:compiled", "em:assembled")

CASES: dict[str, Case] = {
    # 15 rounds for the heavy top: VI-A and EM differ by a few per cent, less than the
    # host's run-to-run noise, so their comparison (target 1, best of the rounds) needs many
    "heavy_top": Case("heavy_top", "heavy top", heavy_top, h=1e-3, steps=2000, repeats=15,
                      solvers=HEAVY_TOP_SOLVERS),
    "four_particle": Case("four_particle", "four-particle", four_particle, h=0.01, steps=300,
                          repeats=5, solvers=("em", "ggl-vi-a")),
    "double_pendulum": Case("double_pendulum", "double pendulum", double_pendulum, h=2e-3,
                            steps=300, repeats=5, solvers=("em", "ggl-vi-a")),
    "four_bar": Case("four_bar", "four-bar (closed loop)", four_bar, h=2e-3, steps=300,
                     repeats=5, solvers=("em", "ggl-vi-a")),
    "chain10": Case("chain10", "chain N=10", lambda: chain(10), h=1e-3, steps=1000, repeats=3,
                    solvers=("em", "ggl-vi-a"), n_links=10),
    "chain100": Case("chain100", "chain N=100", lambda: chain(100), h=1e-3, steps=200,
                     repeats=5, solvers=("em", "ggl-vi-a"), warm_steps=2, n_links=100),
    "chain1000": Case("chain1000", "chain N=1000", lambda: chain(1000), h=1e-3, steps=20,
                      repeats=5, solvers=("em", "ggl-vi-a"), warm_steps=1, n_links=1000),
}

#: The smoke-test subset of ``--quick`` (case name -> solvers, steps, repeats).
QUICK = {
    "heavy_top": (("em", "ggl-vi-a", "em:compiled"), 100, 3),
    "four_particle": (("em",), 100, 3),
    "chain10": (("em",), 30, 2),
}


# -- heavy top: exact steady precession -------------------------------------------------------
def heavy_top_constants() -> dict:
    """Mass, inertia, lever, gravity, nutation angle, precession and spin rates of the top."""
    ht = example("heavy_top")
    return {"mass": ht.MASS, "inertia": ht.INERTIA, "length": ht.LENGTH, "gravity": ht.GRAVITY,
            "nutation": ht.NUTATION, "precession_rate": ht.PRECESSION_RATE,
            "spin_rate": ht.spin_rate()}


def heavy_top_rotation(t: float) -> np.ndarray:
    """Exact R(t) = R_z(w_p t) R0 R_z(w_s t) with R0 = R_x(nutation)."""
    c = heavy_top_constants()
    return (mbs.rotation_about_z(c["precession_rate"] * t) @ mbs.rotation_about_x(c["nutation"])
            @ mbs.rotation_about_z(c["spin_rate"] * t))


def heavy_top_com(t: float) -> np.ndarray:
    """Exact centre of mass phi(t) = l d3(t)."""
    return heavy_top_constants()["length"] * heavy_top_rotation(t)[:, 2]


def heavy_top_initial() -> dict:
    """Initial centre of mass, rotation, velocity and angular velocity w_p e3 + w_s d3."""
    c = heavy_top_constants()
    rotation = mbs.rotation_about_x(c["nutation"])
    omega = c["precession_rate"] * np.array([0.0, 0.0, 1.0]) + c["spin_rate"] * rotation[:, 2]
    position = c["length"] * rotation[:, 2]
    return {"position": position, "rotation": rotation, "velocity": np.cross(omega, position),
            "angular_velocity": omega}


def com_error(position: np.ndarray, t: float) -> float:
    """|phi - phi_exact(t)| / l (Euclidean norm, relative to the lever length l)."""
    return float(np.linalg.norm(np.asarray(position) - heavy_top_com(t))
                 / heavy_top_constants()["length"])
