"""Bodies: rigid bodies (director formulation), point masses and the ground."""

from mbs.bodies.base import Body, Ground
from mbs.bodies.point_mass import PointMass
from mbs.bodies.rigid_body import RigidBody

__all__ = ["Body", "Ground", "PointMass", "RigidBody"]
