"""Four-particle system (seed 003, section 6.3; originally Gonzalez 1999).

Four point masses; particles 1-3 and 2-4 are joined by nonlinear springs
V = 1/2 k ((q_b - q_a) . (q_b - q_a) - l^2)^2 (eq. (116)), particles 1-2 and 3-4 by rigid
distances of length 1 (eq. (117)). The system is free (no gravity, no ground), so total energy,
linear momentum (118) and angular momentum (121) are first integrals. Initial data (127): a unit
square in the x-y plane at rest except particle 4, which moves out of the plane.
"""

from __future__ import annotations

import numpy as np

import mbs

MASSES = (1.0, 3.0, 2.3, 1.7)
POSITIONS = ((0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (1.0, 1.0, 0.0))
VELOCITIES = ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 2.0 / 1.7))
SPRINGS = ((1, 3, 50.0), (2, 4, 500.0))  # (particle a, particle b, stiffness k)
SPRING_LENGTH = 1.0  # l13 = l24
RIGID_LINKS = ((1, 2), (3, 4))  # |q2 - q1| = |q4 - q3| = 1
LINK_LENGTH = 1.0
STEP = 0.01
END_TIME = 10.0


def build() -> mbs.System:
    """The four-particle system of seed 003, section 6.3, at its initial state (127)."""
    system = mbs.System(gravity=None)
    particles = []
    for i, (mass, position, velocity) in enumerate(zip(MASSES, POSITIONS, VELOCITIES), 1):
        particle = system.add(mbs.PointMass(mass=mass, name=f"p{i}"))
        particle.set_state(position=np.array(position), velocity=np.array(velocity))
        particles.append(particle)
    for a, b, stiffness in SPRINGS:
        system.add(mbs.forces.QuarticSpring(particles[a - 1], particles[b - 1],
                                            stiffness=stiffness, length=SPRING_LENGTH,
                                            name=f"spring{a}{b}"))
    for a, b in RIGID_LINKS:
        system.add(mbs.joints.Distance(particles[a - 1], particles[b - 1], length=LINK_LENGTH,
                                       name=f"link{a}{b}"))
    return system


if __name__ == "__main__":
    system = build()
    model = system.compile()
    system.summary(model)
    solution = mbs.simulate(model, "em", h=STEP, t_end=END_TIME)
    print(solution.conservation_summary())
