"""Off-screen rendering with PyVista: snapshots, GIF/MP4 frame counts, subsampling cost."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mbs

pytest.importorskip("pyvista")
imageio = pytest.importorskip("imageio.v2")
from PIL import Image  # noqa: E402

from mbs import viz  # noqa: E402
from mbs.viz.frames import frame_count, select_frames  # noqa: E402
from mbs.viz.kinematics import poses  # noqa: E402
from mbs.viz.visuals import SceneOptions, describe  # noqa: E402

SMALL = (160, 120)


@pytest.fixture(scope="module")
def top_solution():
    import heavy_top

    return mbs.simulate(heavy_top.build().compile(), "em", h=0.01, t_end=0.3)


def stretched(solution, steps: int):
    """A solution with ``steps`` steps over the same interval (interpolated nodes)."""
    t = np.linspace(solution.t[0], solution.t[-1], steps + 1)
    q = np.column_stack([np.interp(t, solution.t, col) for col in solution.q.T])
    p = np.column_stack([np.interp(t, solution.t, col) for col in solution.p.T])
    m = solution.model.m
    return mbs.Solution(model=solution.model, t=t, q=q, p=p,
                        scheme_velocities=np.zeros((steps, q.shape[1])),
                        multipliers=np.zeros((steps, m)), velocity_multipliers=np.zeros((steps, m)),
                        enforced_residuals=np.zeros((steps, 2)),
                        stats={"solver": "em", "h": float(t[1] - t[0])},
                        solver_properties=solution.solver_properties)


def test_frame_selection_depends_on_playback_not_steps():
    t_short, t_long = np.linspace(0.0, 2.0, 11), np.linspace(0.0, 2.0, 10001)
    for t in (t_short, t_long):
        indices, times = select_frames(t, fps=30, speed=1.0)
        assert indices.size == 61 == frame_count(0.0, 2.0, 30, 1.0)
        assert times[0] == 0.0 and times[-1] == 2.0
        assert np.all(np.abs(t[indices] - times) <= 0.5 * (t[1] - t[0]) + 1e-12)
    assert select_frames(t_long, fps=30, speed=2.0)[0].size == 31
    assert select_frames(t_long, frames=7)[0].size == 7
    with pytest.raises(mbs.ModelError):
        select_frames(t_long, fps=0.0)
    # the frame rate is the video's also when frames= sets the count (checked before any
    # file is written); a frame count is a whole number
    with pytest.raises(mbs.ModelError, match="fps must be a positive number, got 0"):
        select_frames(t_long, fps=0, frames=5)
    with pytest.raises(mbs.ModelError, match="frames must be a whole number of at least 1, "
                                             "got 2.7"):
        select_frames(t_long, frames=2.7)
    assert select_frames(t_long, frames=np.int64(3))[0].size == 3


def test_snapshot_is_not_blank_and_the_top_moves(tmp_path, top_solution):
    first = viz.snapshot(top_solution, tmp_path / "t0.png", time=0.0, resolution=SMALL)
    later = viz.snapshot(top_solution, tmp_path / "t1.png", time=0.15, resolution=SMALL)
    image = np.asarray(Image.open(tmp_path / "t0.png"))
    assert image.shape[:2] == (SMALL[1], SMALL[0])
    assert np.array_equal(image[..., :3], first)
    assert first.std() > 10.0  # not a blank image
    assert len(np.unique(first.reshape(-1, 3), axis=0)) > 50
    changed = np.any(np.abs(first.astype(int) - later.astype(int)) > 30, axis=-1)
    assert changed.mean() > 0.002  # the top has moved between t = 0 and t = 0.15


def test_progress_bars_show_on_request_only_outside_a_terminal(tmp_path, top_solution, capsys):
    """Like simulate, animate shows its bar on an interactive terminal by default, so that
    logs and captured output stay clean; progress=True shows it anywhere."""
    viz.animate(top_solution, tmp_path / "quiet.gif", frames=3, resolution=(48, 36))
    assert "frame" not in capsys.readouterr().err
    viz.animate(top_solution, tmp_path / "shown.gif", frames=3, resolution=(48, 36),
                progress=True)
    assert "render shown.gif" in capsys.readouterr().err


def test_gif_has_the_requested_frames(tmp_path, top_solution):
    report = viz.animate(top_solution, tmp_path / "top.gif", frames=4, fps=10,
                         resolution=(96, 72), progress=False)
    frames = imageio.mimread(tmp_path / "top.gif")
    assert len(frames) == report.frames == report.render_calls == 4
    assert frames[0].shape[:2] == (72, 96)


def test_gif_plays_at_the_real_duration(tmp_path, top_solution):
    """0.3 s of motion at speed 0.5 are 0.6 s of video: 19 frames 1/30 s of video (1/60 s of
    motion) apart, the last one reached at 0.6 s. 30 fps is not a whole number of GIF's
    10 ms delays: the delays alternate so that it is (a fixed 30 ms delay would reach it at
    0.54 s)."""
    from PIL import Image

    report = viz.animate(top_solution, tmp_path / "top.gif", fps=30, speed=0.5,
                         resolution=(48, 36), progress=False)
    with Image.open(tmp_path / "top.gif") as image:
        delays = []
        for k in range(image.n_frames):
            image.seek(k)
            delays.append(image.info["duration"])
    assert len(delays) == report.frames == 19
    assert sum(delays[:-1]) == 600 and set(delays) <= {30, 40}


def test_webm_is_written_with_a_webm_codec(tmp_path, top_solution):
    report = viz.animate(top_solution, tmp_path / "top.webm", frames=4, fps=10,
                         resolution=(96, 72), progress=False)
    reader = imageio.get_reader(tmp_path / "top.webm")
    try:
        assert reader.count_frames() == report.frames == 4
    finally:
        reader.close()


def test_mp4_has_the_requested_frames_and_duration(tmp_path, top_solution):
    report = viz.animate(top_solution, tmp_path / "top.mp4", fps=20, speed=0.5,
                         resolution=(96, 72), progress=False)
    expected = frame_count(0.0, 0.3, 20, 0.5)  # 0.3 s in slow motion: 0.6 s of video
    assert report.frames == expected == 13
    reader = imageio.get_reader(tmp_path / "top.mp4")
    try:
        assert reader.count_frames() == expected
        meta = reader.get_meta_data()
        assert meta["fps"] == pytest.approx(20.0)
        assert meta["duration"] == pytest.approx(expected / 20.0, abs=0.06)
    finally:
        reader.close()


def test_render_calls_do_not_grow_with_simulation_length(tmp_path, top_solution):
    reports = [viz.animate(stretched(top_solution, steps), tmp_path / f"s{steps}.gif",
                           frames=2, resolution=(64, 48), progress=False, directors=False)
               for steps in (10, 10000)]
    assert [r.steps for r in reports] == [10, 10000]
    assert reports[0].render_calls == reports[1].render_calls == 2


def test_poses_are_taken_at_the_frames_only(top_solution):
    long = stretched(top_solution, 10000)
    indices, _ = select_frames(long.t, frames=5)
    frame_poses = poses(long, indices)
    assert frame_poses.position.shape == (5, 1, 3)
    trajectory = long.body("top")
    assert np.allclose(frame_poses.rotation[:, 0], trajectory.rotation[indices])
    assert np.allclose(frame_poses.position[:, 0], trajectory.position[indices])


def test_a_trail_of_a_world_point_follows_solution_point(top_solution):
    """trails={body: point} takes the point as Solution.point does (world coordinates at the
    first node), not as body-frame coordinates: the trail starts at the point itself and is
    the path Solution.point gives, node for node."""
    rotation = top_solution.body("top").rotation[0]
    assert not np.allclose(rotation, np.eye(3))  # a tilted top: the two conventions differ
    centre = top_solution.body("top").position[0]
    tip = centre + 0.05 * rotation[:, 0] + (0.01, -0.02, 0.03)
    indices, _ = select_frames(top_solution.t, frames=7)
    scene = describe(top_solution, indices, SceneOptions(trails={"top": tip}))
    trail = next(d for d in scene.dynamic if d.name == "top.trail")
    drawn = trail.points_at(indices.size - 1)  # the whole trail, one point per frame
    expected, _ = top_solution.point("top", tip)
    assert np.array_equal(drawn, expected[indices])
    assert np.allclose(drawn[0], tip, rtol=0.0, atol=1e-12)
    # a name alone traces the centre of mass
    listed = describe(top_solution, indices, SceneOptions(trails=["top"]))
    centre_trail = next(d for d in listed.dynamic if d.name == "top.trail")
    assert np.array_equal(centre_trail.points_at(indices.size - 1),
                          top_solution.body("top").position[indices])
    with pytest.raises(mbs.ModelError, match="3 finite world coordinates"):
        SceneOptions(trails={"top": (0.0, np.nan, 0.0)})


def test_snapshot_between_nodes_warns_and_draws_the_nearest_node(top_solution):
    """A time off the nodes by more than round-off draws the nearest node and says so; node
    times (to round-off) and the default time draw without a warning."""
    h = top_solution.stats["h"]
    with pytest.warns(UserWarning, match=r"time=0.123 lies between the solution's nodes, "
                                         r"which are h = 0.01 apart .*nearest node, "
                                         r"t = 0.12\.") as caught:
        between = viz.snapshot(top_solution, time=0.123, resolution=SMALL)
    assert caught[0].filename == __file__  # attributed to the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        node = viz.snapshot(top_solution, time=12 * h, resolution=SMALL)
        viz.snapshot(top_solution, time=12 * h * (1.0 + 1e-12), resolution=SMALL)
        viz.snapshot(top_solution, resolution=SMALL)
    assert np.array_equal(between, node)  # the same node, labelled with its own time


def shapes_system() -> mbs.System:
    """One body of each shape plus a particle, joints of each kind and a spring."""
    system = mbs.System(gravity=(0.0, 0.0, -9.81))
    kinds = [("box", dict(lx=0.2, ly=0.1, lz=0.05)), ("cylinder", dict(radius=0.05, length=0.3)),
             ("tube", dict(radius=0.05, length=0.3)), ("cone", dict(radius=0.1, height=0.2)),
             ("sphere", dict(radius=0.1)), ("spherical_shell", dict(radius=0.1))]
    bodies = []
    for k, (kind, dims) in enumerate(kinds):
        body = system.add(mbs.RigidBody.from_shape(kind, mass=1.0, name=kind, **dims))
        body.set_state(position=(0.5 * k, 0.0, 1.0))
        bodies.append(body)
    bead = system.add(mbs.PointMass(1.0, name="bead"))
    bead.set_state(position=(0.0, 0.0, 0.0))
    ground = system.ground
    y = (0.0, 1.0, 0.0)
    system.add(mbs.joints.Revolute(ground, bodies[0], point=(0.0, 0.0, 1.2), axis=y))
    system.add(mbs.joints.Prismatic(bodies[0], bodies[1], point=(0.25, 0.0, 1.0),
                                    axis=(1.0, 0.0, 0.0)))
    system.add(mbs.joints.Universal(bodies[1], bodies[2], point=(0.75, 0.0, 1.0),
                                    axis_a=y, axis_b=(0.0, 0.0, 1.0)))
    system.add(mbs.joints.Rigid(bodies[2], bodies[3]))
    system.add(mbs.joints.Spherical(bodies[3], bodies[4], point=(1.75, 0.0, 1.0)))
    system.add(mbs.joints.Cylindrical(bodies[4], bodies[5], point=(2.25, 0.0, 1.0), axis=y))
    system.add(mbs.joints.Distance(ground, bead, length=1.0, point_a=(0.0, 0.0, 1.0)))
    system.add(mbs.forces.Spring(bodies[5], bead, stiffness=10.0))
    return system


def test_every_shape_joint_and_spring_gets_a_visual():
    model = shapes_system().compile()
    q0, p0 = model.initial_state(project=True)
    solution = mbs.simulate(model, "em", h=0.01, t_end=0.02, initial_state=(q0, p0))
    scene = describe(solution, np.array([0, 1, 2]),
                     SceneOptions(trails=["bead"], directors=True))
    names = {item.name for item in scene.items}
    for body in model.bodies:
        assert body.name in names
    kinds = {item.kind for item in scene.items}
    assert {"body", "director", "joint", "support", "ground"} <= kinds
    dynamic = {d.kind for d in scene.dynamic}
    assert dynamic == {"rod", "spring", "trail"}
    for dyn in scene.dynamic:
        assert np.all(np.isfinite(dyn.points_at(2)))
    rigid = [body.name for body in model.bodies if body.kind == "rigid"]
    assert len(rigid) > 2  # by default a mechanism is drawn without director arrows
    default = describe(solution, np.array([0, 1, 2]), SceneOptions())
    assert "director" not in {item.kind for item in default.items}


def test_a_single_body_shows_its_directors_by_default():
    """A top, a satellite: one rigid body, whose attitude the director arrows show."""
    system = mbs.System()
    body = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.3, ly=0.2, lz=0.1,
                                               name="box"))
    body.set_state(angular_velocity=(0.0, 0.0, 1.0))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.02)
    scene = describe(solution, np.array([0, 1, 2]), SceneOptions())
    assert [item.name for item in scene.items if item.kind == "director"] == [
        "box.d1", "box.d2", "box.d3"]


def test_explicit_visuals_and_bad_options(top_solution, tmp_path):
    pv = pytest.importorskip("pyvista")
    image = viz.snapshot(top_solution, resolution=(64, 48),
                         visuals={"top": viz.Visual(mesh=pv.Cube(x_length=0.05, y_length=0.05,
                                                                 z_length=0.15), color="red")})
    assert image.shape == (48, 64, 3)
    with pytest.raises(mbs.ModelError, match="unknown visualisation options"):
        viz.snapshot(top_solution, resolution=(64, 48), bogus=True)
    with pytest.raises(mbs.ModelError, match="unknown bodies"):
        viz.snapshot(top_solution, resolution=(64, 48), visuals={"nope": "red"})
    with pytest.raises(mbs.ModelError, match="cannot write an animation"):
        viz.animate(top_solution, tmp_path / "top.avi2", frames=2)
    with pytest.raises(mbs.ModelError, match="outside the solution"):
        viz.snapshot(top_solution, time=5.0)
    with pytest.raises(mbs.ModelError, match=r"t_range \(5, 6\) reaches outside the "
                                              r"solution's times"):
        viz.animate(top_solution, tmp_path / "late.gif", t_range=(5.0, 6.0), progress=False)
    with pytest.raises(mbs.ModelError, match="too low for a GIF"):
        viz.animate(top_solution, tmp_path / "slow.gif", fps=1e-3, frames=2, progress=False)
    with pytest.raises(mbs.ModelError, match="quality must be an integer from 0 to 10"):
        viz.animate(top_solution, tmp_path / "top.mp4", quality=11, frames=2, progress=False)
    with pytest.raises(mbs.ModelError, match="'kind' one of"):
        viz.Visual(shape={"kind": "blob", "radius": 0.1})
    with pytest.raises(mbs.ModelError, match="body 'top'.*positive 'length'"):
        viz.snapshot(top_solution, visuals={"top": {"shape": {"kind": "cylinder",
                                                              "radius": 0.1}}})
    with pytest.raises(mbs.ModelError, match="opacity"):
        viz.Visual(opacity=1.5)
    with pytest.raises(mbs.ModelError, match="visual for body 'top': Visual: color "
                                             "'notacolour' is not a colour"):
        viz.snapshot(top_solution, resolution=(64, 48), visuals={"top": "notacolour"})


def test_unplayable_gif_rates_and_unwritable_paths_fail_before_any_rendering(
        tmp_path, top_solution):
    """A scene option only the rendering would reject (``bogus``) shows that the output is
    refused first; nothing is left behind."""
    with pytest.raises(mbs.ModelError, match="fps = 60 is too high for a GIF"):
        viz.animate(top_solution, tmp_path / "fast.gif", fps=60, frames=2, bogus=True)
    (tmp_path / "taken.gif").mkdir()
    (tmp_path / "plainfile").write_text("not a directory")
    for path, match in ((tmp_path / "taken.gif", "it is a directory; give a file name"),
                        (tmp_path / "plainfile" / "top.mp4", "choose a writable location"),
                        (tmp_path / "plainfile" / "top.gif", "choose a writable location")):
        with pytest.raises(mbs.ModelError, match=f"cannot write an animation to .*{match}"):
            viz.animate(top_solution, path, frames=2, bogus=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plainfile", "taken.gif"]
    assert not any((tmp_path / "taken.gif").iterdir())


def test_follow_camera_tracks_the_body(top_solution):
    indices, _ = select_frames(top_solution.t, frames=3)
    scene = describe(top_solution, indices)
    rig = viz.CameraRig(scene, "follow", follow="top", view="front")
    for k in range(3):
        position, focal, _ = rig.placement(k)
        assert np.allclose(focal, scene.poses.position[k, 0])
        assert np.allclose(position - focal, rig.distance * rig.direction)
    with pytest.raises(mbs.ModelError):
        viz.CameraRig(scene, "follow", follow="nobody")


def test_headless_detection_and_show(monkeypatch, top_solution):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert viz.is_headless()
    with pytest.raises(RuntimeError, match="needs a display"):
        viz.show(top_solution)


def test_lvlh_camera_on_a_body_passing_the_centre(tmp_path):
    """The local vertical is undefined where the body is at the centre (here the origin,
    with no central gravity): that frame is drawn with the fixed view-up, not left blank."""
    system = mbs.System()
    box = system.add(mbs.RigidBody.from_shape("box", mass=1.0, lx=0.2, ly=0.1, lz=0.05,
                                              name="box"))
    box.set_state(position=(0, 0, 0), velocity=(3, 0, 5), angular_velocity=(1, 2, 3))
    solution = mbs.simulate(system.compile(), "em", h=0.01, t_end=0.3, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        viz.animate(solution, tmp_path / "lvlh.gif", camera="lvlh", frames=3,
                    resolution=(80, 60), progress=False)
    frames = imageio.mimread(tmp_path / "lvlh.gif")
    assert all(np.asarray(frame).std() > 10.0 for frame in frames)


def test_follow_alone_chooses_the_follow_camera_and_bad_combinations_fail_early(
        tmp_path, top_solution):
    alone = viz.snapshot(top_solution, resolution=SMALL, follow="top")
    explicit = viz.snapshot(top_solution, resolution=SMALL, camera="follow", follow="top")
    fixed = viz.snapshot(top_solution, resolution=SMALL)
    assert np.array_equal(alone, explicit) and not np.array_equal(alone, fixed)
    with pytest.raises(mbs.ModelError, match="camera='fixed' shows the whole motion"):
        viz.snapshot(top_solution, resolution=SMALL, camera="fixed", follow="top")
    with pytest.raises(mbs.ModelError, match="'top.xyz' is no image type Pillow writes"):
        viz.snapshot(top_solution, tmp_path / "top.xyz", resolution=SMALL)
    assert not (tmp_path / "top.xyz").exists()


def test_scene_options_are_checked_and_one_body_name_is_a_list_of_it(top_solution, tmp_path):
    """Options that failed inside numpy or PyVista, were split into letters, or were taken
    silently; snapshots to a type Pillow cannot write or to a directory fail before the
    rendering."""
    single = viz.snapshot(top_solution, resolution=(64, 48), trails="top", directors="top")
    listed = viz.snapshot(top_solution, resolution=(64, 48), trails=["top"],
                          directors=["top"])
    assert np.array_equal(single, listed)
    for options, message in (({"view": (1, 0)}, "a direction vector of 3 world coordinates"),
                             ({"background": "notacolour"}, "background 'notacolour' is not"),
                             ({"glyph_scale": -1.0}, "glyph_scale must be a positive"),
                             ({"ground_plane": "yes"}, "ground_plane must be True, False"),
                             ({"trails": {"top": (1, 2)}}, "the point of 'top' must be 3")):
        with pytest.raises(mbs.ModelError, match=message):
            viz.snapshot(top_solution, resolution=(64, 48), **options)
    with pytest.raises(mbs.ModelError, match="fps must be a positive number, got '30'"):
        viz.animate(top_solution, tmp_path / "top.mp4", fps="30", progress=False)
    with pytest.raises(mbs.ModelError, match="'top.psd' is no image type Pillow writes"):
        viz.snapshot(top_solution, tmp_path / "top.psd", resolution=(64, 48), bogus=True)
    (tmp_path / "taken.png").mkdir()
    with pytest.raises(mbs.ModelError, match="it is a directory"):
        viz.snapshot(top_solution, tmp_path / "taken.png", resolution=(64, 48), bogus=True)
