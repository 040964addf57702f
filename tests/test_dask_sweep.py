"""Parameter sweeps on a real Dask scheduler (``distributed.LocalCluster``): the same
results, bitwise, as the serial sweep of :func:`mbs.simulate_many`."""

from __future__ import annotations

import numpy as np
import pytest

import mbs

distributed = pytest.importorskip("distributed")


def top(spin: float) -> mbs.Model:
    """The heavy top of the README, spinning at ``spin`` rad/s about its axis."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    body = system.add(mbs.RigidBody(mass=0.7069, inertia=(5.3014e-4,) * 3, name="top"))
    tilt = mbs.rotation_about_x(np.pi / 3)
    omega = np.array([0.0, 0.0, 10.0]) + spin * tilt[:, 2]
    position = tilt @ np.array([0.0, 0.0, 0.075])
    body.set_state(position=position, rotation=tilt, velocity=np.cross(omega, position),
                   angular_velocity=omega)
    system.add(mbs.joints.Spherical(system.ground, body, point=(0.0, 0.0, 0.0)))
    return system.compile()


def sweep(count: int) -> list[tuple[mbs.Model, dict]]:
    """Heavy tops whose spin rates differ: one model per member, a parameter sweep."""
    return [(top(float(spin)), {"solver": "em", "h": 0.002, "t_end": 0.1})
            for spin in np.linspace(100.0, 180.0, count)]


def test_local_cluster_sweep_equals_the_serial_sweep():
    runs = sweep(100)
    serial = mbs.simulate_many(runs)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        remote = mbs.simulate_many(runs, executor=client.get_executor())
    assert len(remote) == len(serial) == 100
    for local, far in zip(serial, remote):
        np.testing.assert_array_equal(far.q, local.q)
        np.testing.assert_array_equal(far.p, local.p)
        np.testing.assert_array_equal(far.t, local.t)
