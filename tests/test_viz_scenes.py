"""Scenes the default camera must get right: satellites in central gravity (planet, orbit
track, small bodies on large orbits), auto-framing of mechanisms, open tubes and rings, and
the Jupyter path of ``viz.show``."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import mbs

pytest.importorskip("pyvista")

from mbs import viz  # noqa: E402
from mbs.viz import geometry  # noqa: E402

SIZE = (320, 240)
BACKGROUND = np.array([255, 255, 255])
EARTH_MU, EARTH_RADIUS = 3.986004418e14, 6.371e6


def satellite_system(mu: float = 1.0, radius: float = 1.0, size=(0.02, 0.01, 0.04),
                     pitch: float = np.radians(10.0), center=(0.0, 0.0, 0.0)) -> mbs.System:
    """A box satellite on a circular orbit about ``center``, pitched about the orbit normal
    (as in examples/satellite_libration.py)."""
    system = mbs.System(gravity=None)
    lx, ly, lz = size
    satellite = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=lx, ly=ly, lz=lz,
                                                    name="satellite"))
    rate = np.sqrt(mu / radius**3)
    nominal = np.column_stack([(0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (1.0, 0.0, 0.0)])
    center = np.asarray(center, dtype=float)
    satellite.set_state(position=center + (radius, 0.0, 0.0),
                        velocity=(0.0, radius * rate, 0.0),
                        rotation=mbs.rotation_about_z(pitch) @ nominal,
                        angular_velocity=(0.0, 0.0, rate))
    system.add(mbs.forces.CentralGravity(mu, center=center, name="planet"))
    return system


@pytest.fixture(scope="module")
def satellite():
    return mbs.simulate(satellite_system().compile(), "em", h=0.05, t_end=2.0)


@pytest.fixture(scope="module")
def leo_satellite():
    """A 2 m satellite 629 km above the Earth, in SI units."""
    system = satellite_system(EARTH_MU, 7.0e6, size=(1.0, 0.5, 2.0))
    return mbs.simulate(system.compile(), "em", h=20.0, t_end=200.0)


def default_scene(solution, frames: int = 5, **options) -> viz.Scene:
    """The scene ``viz.animate`` renders with its default camera."""
    indices, _ = viz.select_frames(solution.t, frames=frames)
    description = viz.describe(solution, indices, viz.SceneOptions(**options))
    rig = viz.CameraRig(description, aspect=SIZE[0] / SIZE[1])
    return viz.Scene(description, rig, resolution=SIZE, off_screen=True)


def pixel(scene: viz.Scene, world) -> tuple[float, float]:
    """(column, row) of a world point in the main view's image."""
    renderer = scene.plotter.renderer
    renderer.SetWorldPoint(*np.asarray(world, dtype=float), 1.0)
    renderer.WorldToDisplay()
    x, y, _ = renderer.GetDisplayPoint()
    return x, SIZE[1] - 1 - y


def drawn_near(image: np.ndarray, column: float, row: float, half: int = 3) -> np.ndarray:
    """Pixels of a (2 half + 1)^2 window that differ from the background."""
    c, r = int(round(column)), int(round(row))
    window = image[max(r - half, 0):r + half + 1, max(c - half, 0):c + half + 1].astype(int)
    return window[np.abs(window - BACKGROUND).max(axis=-1) > 30]


def inside_main_view(scene: viz.Scene, column: float, row: float) -> bool:
    x0, y0, x1, y1 = scene.camera.inset.viewport if scene.inset is not None else (1, 1, 1, 1)
    in_image = 0 <= column < SIZE[0] and 0 <= row < SIZE[1]
    in_inset = x0 * SIZE[0] <= column and (1 - y1) * SIZE[1] <= row < (1 - y0) * SIZE[1]
    return in_image and not in_inset


def earth_blue(pixels: np.ndarray) -> bool:
    return bool(np.any((pixels[:, 2] > pixels[:, 0] + 40) & (pixels[:, 2] > 80)))


@pytest.mark.parametrize("case", ["normalised", "si"])
def test_satellite_and_planet_are_visible_with_the_default_camera(case, satellite,
                                                                  leo_satellite):
    solution = satellite if case == "normalised" else leo_satellite
    with default_scene(solution) as scene:
        image = scene.render(0)
        planet = scene.description.central[0]
        position = solution.body("satellite").position[0]
        column, row = pixel(scene, position)
        assert inside_main_view(scene, column, row)
        assert drawn_near(image, column, row).shape[0] >= 40  # a filled 7 x 7 window
        column, row = pixel(scene, planet.center)
        assert inside_main_view(scene, column, row)
        assert earth_blue(drawn_near(image, column, row))
        # the inset shows the satellite itself large enough to see its attitude
        assert scene.inset is not None
        x0, y0, x1, y1 = scene.camera.inset.viewport
        inset = image[int((1 - y1) * SIZE[1]):int((1 - y0) * SIZE[1]),
                      int(x0 * SIZE[0]):int(x1 * SIZE[0])].astype(int)
        orange = np.array([224, 160, 48])  # the first palette colour, the satellite's
        body = np.abs(inset - orange).max(axis=-1) < 90
        assert body.mean() > 0.03
    expected = EARTH_RADIUS if case == "si" else 0.4  # 0.4 x the closest approach (~1)
    assert planet.radius == pytest.approx(expected, rel=1e-3)


def test_central_body_radius_orbit_tracks_and_options(satellite):
    indices, _ = viz.select_frames(satellite.t, frames=4)
    scene = viz.describe(satellite, indices)
    kinds = {item.kind for item in scene.items}
    assert {"central", "orbit"} <= kinds
    orbit = next(item for item in scene.items if item.kind == "orbit")
    radii = np.linalg.norm(np.asarray(orbit.mesh.points), axis=1)
    assert orbit.mesh.n_points == len(satellite.t)  # every node of the shown range
    assert np.allclose(radii, 1.0, atol=1e-3)
    assert [o.kind for o in scene.overlays] == ["marker"]

    chosen = viz.describe(satellite, indices, viz.SceneOptions(central_body=0.25))
    assert chosen.central[0].radius == 0.25
    hidden = viz.describe(satellite, indices, viz.SceneOptions(central_body=False))
    assert not hidden.central and hidden.inset is not None  # still a central gravity scene
    plain = viz.describe(satellite, indices, viz.SceneOptions(
        central_body=False, orbits=False, markers=False, inset=False))
    assert not plain.central and not plain.overlays and plain.inset is None
    assert not {"central", "orbit"} & {item.kind for item in plain.items}
    with pytest.raises(mbs.ModelError, match="no CentralGravity element"):
        viz.describe(satellite, indices, viz.SceneOptions(central_body={"moon": 1.0}))


def test_snapshot_of_a_satellite_shows_planet_and_satellite(satellite, tmp_path):
    image = viz.snapshot(satellite, tmp_path / "sat.png", time=0.0, resolution=SIZE)
    pixels = image.reshape(-1, 3).astype(int)
    assert earth_blue(pixels)
    orange = np.abs(pixels - np.array([224, 160, 48])).max(axis=-1) < 90
    assert orange.mean() > 0.01


def test_following_cameras_get_no_automatic_inset_or_marker():
    center = np.array([3.0, -2.0, 0.5])
    satellite = mbs.simulate(satellite_system(center=center).compile(), "em", h=0.05,
                             t_end=0.5)
    indices, _ = viz.select_frames(satellite.t, frames=3)
    description = viz.describe(satellite, indices)
    rig = viz.CameraRig(description, "lvlh", follow="satellite")
    assert rig.inset is None
    assert np.allclose(rig.center, center)  # the central gravity's centre
    with viz.Scene(description, rig, resolution=SIZE, off_screen=True) as scene:
        image = scene.render(1)
        assert scene.inset is None
        position = satellite.body("satellite").position[indices[1]]
        _, _, view_up = rig.placement(1)
        radial = (position - center) / np.linalg.norm(position - center)
        assert np.allclose(view_up, radial)  # local vertical up
        column, row = pixel(scene, position)
        assert abs(column - SIZE[0] / 2) < 2 and abs(row - SIZE[1] / 2) < 2
        assert drawn_near(image, column, row, 10).shape[0] > 300


def chain_solution():
    import chain

    return mbs.simulate(chain.build(links=4).compile(), "em", h=0.01, t_end=1.2)


@pytest.fixture(scope="module")
def chain_run():
    return chain_solution()


@pytest.mark.parametrize("mode", ["fixed", "follow"])
def test_auto_framing_keeps_every_body_in_the_image(mode, chain_run):
    indices, _ = viz.select_frames(chain_run.t, frames=8)
    description = viz.describe(chain_run, indices)
    rig = viz.CameraRig(description, mode, follow="link1", aspect=SIZE[0] / SIZE[1])
    names = description.poses.names
    with viz.Scene(description, rig, resolution=SIZE, off_screen=True) as scene:
        for frame in range(len(indices)):
            scene.update(frame)
            for b, name in enumerate(names):
                radius = description.body_radius[name]
                center = description.poses.position[frame, b]
                rotation = description.poses.rotation[frame, b]
                ends = [center + s * radius * rotation[:, 2] for s in (-1.0, 1.0)]
                for point in [center, *ends]:
                    column, row = pixel(scene, point)
                    assert 0 <= column < SIZE[0] and 0 <= row < SIZE[1], (mode, frame, name)


def test_open_tube_and_torus_meshes():
    tube = geometry.shape_mesh({"kind": "tube", "radius": 0.1, "length": 0.3})
    assert tube.n_open_edges == 2 * geometry.RESOLUTION  # two rims, no end discs
    closed = geometry.shape_mesh({"kind": "tube", "radius": 0.1, "length": 0.3,
                                  "capped": True}).clean()
    assert closed.n_open_edges == 0
    solid = geometry.shape_mesh({"kind": "cylinder", "radius": 0.1, "length": 0.3}).clean()
    assert solid.n_open_edges == 0
    assert geometry.shape_mesh({"kind": "cylinder", "radius": 0.1, "length": 0.3,
                                "capped": False}).n_open_edges > 0

    ring, tube_radius = 0.2, 0.03
    torus = geometry.shape_mesh({"kind": "torus", "radius": ring, "tube_radius": tube_radius})
    edges = torus.extract_all_edges().n_cells
    assert torus.n_open_edges == 0 and torus.is_manifold
    assert torus.n_points - edges + torus.n_cells == 0  # Euler characteristic 0: genus 1
    assert torus.volume == pytest.approx(2 * np.pi**2 * ring * tube_radius**2, rel=0.03)
    distance = np.linalg.norm(np.asarray(torus.points)[:, :2], axis=1)
    assert distance.min() == pytest.approx(ring - tube_radius, rel=1e-6)
    assert distance.max() == pytest.approx(ring + tube_radius, rel=1e-6)
    assert np.abs(np.asarray(torus.points)[:, 2]).max() <= tube_radius * (1 + 1e-9)
    thin = geometry.shape_mesh({"kind": "ring", "radius": 1.0})
    assert thin.n_open_edges == 0
    with pytest.raises(mbs.ModelError, match="tube_radius"):
        geometry.shape_mesh({"kind": "torus", "radius": 1.0})


def rotor_in_tube(**tube_visual) -> np.ndarray:
    """Top view of a rotor inside a coaxial tube (the gimbal case)."""
    system = mbs.System(gravity=None)
    rotor = system.add(mbs.RigidBody.from_shape("cylinder", mass=1.0, radius=0.05,
                                                length=0.02, name="rotor"))
    tube = system.add(mbs.RigidBody.from_shape("tube", mass=0.2, radius=0.1, length=0.2,
                                               name="tube"))
    rotor.set_state(angular_velocity=(0.0, 0.0, 5.0))
    tube.set_state()
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.02)
    visuals = {"tube": tube_visual} if tube_visual else {}
    return viz.snapshot(solution, view="top", resolution=(120, 120), directors=False,
                        world_axes=False, time_label=False, visuals=visuals)


def test_rotor_is_visible_through_an_open_tube():
    open_tube = rotor_in_tube()
    without_tube = rotor_in_tube(visible=False)
    capped = rotor_in_tube(shape={"kind": "tube", "radius": 0.1, "length": 0.2,
                                  "capped": True})
    middle = (slice(45, 75), slice(45, 75))  # the rotor's face, seen down the tube's axis
    assert np.abs(open_tube[middle].astype(int) - without_tube[middle]).max() <= 40
    assert np.abs(capped[middle].astype(int) - without_tube[middle]).max() > 40


def test_ring_shape_on_a_body_is_drawn_as_a_torus(satellite):
    indices, _ = viz.select_frames(satellite.t, frames=2)
    ring = {"kind": "torus", "radius": 0.05, "tube_radius": 0.005}
    scene = viz.describe(satellite, indices, viz.SceneOptions(
        visuals={"satellite": viz.Visual(shape=ring)}))
    item = next(item for item in scene.items if item.name == "satellite")
    assert item.mesh.n_open_edges == 0
    assert scene.body_radius["satellite"] == pytest.approx(0.055)


def test_show_in_jupyter_without_trame_names_the_extra(monkeypatch, satellite):
    for name in ("trame", "trame_pyvista", "trame_vtk"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    with pytest.raises(ImportError, match=r'pip install "pyvista\[jupyter\]"'):
        viz.show(satellite, jupyter_backend="trame")


def test_show_without_display_points_to_files_and_notebooks(monkeypatch, satellite):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(RuntimeError, match="jupyter_backend='trame'"):
        viz.show(satellite)


def test_show_in_a_notebook_with_the_static_backend(satellite):
    pytest.importorskip("IPython")
    assert viz.show(satellite, jupyter_backend="static", resolution=(96, 72)) is None
