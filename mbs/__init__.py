"""mbs: multibody dynamics with structure-preserving time integration.

Build a :class:`System` from bodies, joints and forces, ``compile()`` it into a :class:`Model`,
and integrate it with the solvers of :mod:`mbs.solvers`.
"""

import importlib

from mbs import bodies, forces, joints, solvers
from mbs.bodies import Ground, PointMass, RigidBody
from mbs.ensemble import EnsembleSolution, simulate_ensemble, simulate_many
from mbs.errors import (
    ForceFunctionError,
    InconsistentInitialStateError,
    MbsError,
    ModelError,
    ModelTypeError,
    SimulationError,
    SimulationInterrupted,
    SolverError,
    UnknownNameError,
)
from mbs.io import load_solution, save_solution
from mbs.liegroup.model import (
    LieGroupModel,
    LieGroupState,
    director_to_lie_group,
    lie_group_to_director,
)
from mbs.model import Model
from mbs.rotations import (
    rotation_about_x,
    rotation_about_y,
    rotation_about_z,
    rotation_from_axis_angle,
    rotation_from_quaternion,
)
from mbs.serialization import load_system, save_system
from mbs.simulate import simulate
from mbs.solution import BodyTrajectory, Solution
from mbs.system import System

__version__ = "0.1.0"

#: Submodules imported on first use (``mbs.plots`` needs matplotlib, ``mbs.viz`` PyVista:
#: ``import mbs`` does not pay for them).
_LAZY_SUBMODULES = ("analysis", "gallery", "liegroup", "plots", "viz")


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"mbs.{name}")
    raise AttributeError(f"module 'mbs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))



__all__ = ["ForceFunctionError", "SimulationError",
    "BodyTrajectory", "Ground", "InconsistentInitialStateError", "MbsError", "Model",
    "ModelError", "ModelTypeError", "PointMass", "RigidBody", "SimulationInterrupted",
    "Solution", "SolverError", "System", "UnknownNameError", "bodies", "forces", "joints",
    "rotation_about_x",
    "rotation_about_y", "rotation_about_z", "rotation_from_axis_angle",
    "load_system", "rotation_from_quaternion", "simulate", "solvers", "EnsembleSolution",
    "simulate_ensemble", "simulate_many", "load_solution", "save_solution", "save_system",
    "LieGroupModel", "LieGroupState", "director_to_lie_group", "lie_group_to_director",
]
