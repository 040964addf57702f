"""Forces: conservative potentials written through quadratic invariants (see
:mod:`mbs.forces.base`) and work-doing loads, dampers and actuators (see
:mod:`mbs.forces.applied`)."""

from mbs.forces.applied import BodyState, JointDamper, JointForce, JointTorque, Load
from mbs.forces.base import Force, InvariantTerm
from mbs.forces.control import JointEfforts
from mbs.forces.gravity import CentralGravity, UniformGravity
from mbs.forces.springs import Damper, QuarticSpring, Spring, TorsionSpring
from mbs.forces.user import AxisProduct, PointComponent, SquaredDistance, UserPotential

__all__ = ["AxisProduct", "BodyState", "CentralGravity", "Damper", "Force", "InvariantTerm",
           "JointDamper", "JointEfforts", "JointForce", "JointTorque", "Load", "PointComponent",
           "QuarticSpring", "Spring", "SquaredDistance", "TorsionSpring", "UniformGravity",
           "UserPotential"]
