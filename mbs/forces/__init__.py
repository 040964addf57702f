"""Conservative forces, all written through quadratic invariants (see :mod:`mbs.forces.base`)."""

from mbs.forces.base import Force, InvariantTerm
from mbs.forces.gravity import CentralGravity, UniformGravity
from mbs.forces.springs import QuarticSpring, Spring
from mbs.forces.user import AxisProduct, PointComponent, SquaredDistance, UserPotential

__all__ = ["AxisProduct", "CentralGravity", "Force", "InvariantTerm", "PointComponent",
           "QuarticSpring", "Spring", "SquaredDistance", "UniformGravity", "UserPotential"]
