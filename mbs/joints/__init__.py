"""Holonomic joints in director form; every equation is at most quadratic in q."""

from mbs.joints.axis_joints import Cylindrical, Prismatic, Revolute, Rigid, Universal
from mbs.joints.base import Joint
from mbs.joints.drive import Drive
from mbs.joints.point_joints import Distance, Spherical
from mbs.joints.user import UserConstraint

Fixed = Rigid
"""Another name of :class:`Rigid`: welds two bodies together."""

__all__ = ["Cylindrical", "Distance", "Drive", "Fixed", "Joint", "Prismatic", "Revolute", "Rigid",
           "Spherical", "Universal", "UserConstraint"]
