"""The bundled example gallery: names, modules and recommended settings.

Every example is a module in the repository's ``examples/`` folder with a ``build()`` function
returning an :class:`mbs.System`, and optionally

* ``RECOMMENDED = dict(solver=..., h=..., t_end=...)``: settings for a meaningful run;
* ``VIZ = dict(...)``: options for :func:`mbs.viz.animate` (camera, view, trails, ...);
* ``report(solution) -> str``: an example-specific result printed after the run.

The registry below names them for ``mbs run NAME``; entries whose module is absent are listed
as unavailable. The folder is found next to the installed package (editable installs and
source checkouts) or through the environment variable ``MBS_EXAMPLES_DIR``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

from mbs.errors import MbsError, ModelError


@dataclass(frozen=True)
class Example:
    name: str
    module: str  # file stem in examples/
    title: str
    recommended: dict = field(default_factory=dict)  # fallback when the module has none
    viz: dict = field(default_factory=dict)


EXAMPLES: dict[str, Example] = {e.name: e for e in (
    Example("pendulum-3d", "pendulum_3d", "mathematical pendulum in 3-D",
            dict(solver="em", h=0.01, t_end=5.0), dict(view="iso", trails=["bob"])),
    Example("heavy-top", "heavy_top", "heavy top in steady precession",
            dict(solver="em", h=0.002, t_end=2.0),
            # 0.1 up the top's axis, tilted by pi/3 about x at the initial pose
            dict(view="iso", trails={"top": (0.0, -0.1 * np.sin(np.pi / 3), 0.05)})),
    Example("dzhanibekov", "dzhanibekov", "free body spinning near its intermediate axis"),
    Example("four-particle", "four_particle", "four particles, springs and rigid links",
            dict(solver="em", h=0.01, t_end=10.0)),
    Example("tethered-satellites", "tethered_satellites",
            "three tethered satellites orbiting a planet", dict(solver="em", h=0.1, t_end=50.0)),
    Example("satellite-libration", "satellite_libration",
            "gravity-gradient pitch libration of a satellite in a circular orbit"),
    Example("double-pendulum", "double_pendulum", "double pendulum of two rigid links"),
    Example("four-bar", "four_bar", "planar four-bar linkage (crank-rocker)"),
    Example("slider-crank", "slider_crank", "slider-crank mechanism"),
    Example("chain", "chain", "chain of N rigid links on ball joints"),
    Example("motor-slider-crank", "motor_slider_crank",
            "slider-crank run up by a motor against a dashpot and a gas load",
            dict(solver="em", h=0.002, t_end=4.0)),
    Example("flyball-governor", "flyball_governor",
            "Watt flyball governor spun up by a motor to a steady speed",
            dict(solver="em", h=0.01, t_end=6.0),
            dict(view="iso", directors=False, trails=["ball_right"])),
    Example("reaction-wheel", "reaction_wheel",
            "satellite slewed by a reaction wheel under PD attitude control",
            dict(solver="em", h=0.08, t_end=24.0),
            dict(view="top", directors=["satellite"], ground_plane=False,
                 visuals={"satellite": {"opacity": 0.35}})),
    Example("andrews-squeezer", "andrews_squeezer",
            "Andrews' squeezing mechanism (seven bodies, motor torque, spring)"),
    Example("iftomm-pendulum", "iftomm_pendulum", "IFToMM benchmark A01: simple pendulum"),
    Example("iftomm-four-bar", "iftomm_four_bar", "IFToMM benchmark A02: N four-bar mechanism"),
    Example("bricard", "bricard", "IFToMM benchmark A04: Bricard's over-constrained mechanism"),
)}

DEFAULT_SETTINGS = dict(solver="em", h=0.01, t_end=1.0)


def examples_dir() -> Path:
    """The folder holding the example modules."""
    env = os.environ.get("MBS_EXAMPLES_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "examples"


def example_path(name: str) -> Path:
    """File of the registered example ``name`` (whether or not it exists)."""
    if name not in EXAMPLES:
        raise ModelError(f"unknown example {name!r}; available: {', '.join(EXAMPLES)} "
                         f"(or give the path of a script defining build())")
    return examples_dir() / f"{EXAMPLES[name].module}.py"


def available(name: str) -> bool:
    return example_path(name).is_file()


def load_module(path) -> ModuleType:
    """Import a Python file as a module (its folder is put on sys.path while it runs)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ModelError(f"no such file: {path}")
    module_name = f"mbs_user_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except MbsError:
        raise
    except Exception as exc:  # the user's code: name it and where it failed
        raise ModelError(f"{path}: running the script raised {script_failure(exc, path)}"
                         ) from exc
    finally:
        if added:
            sys.path.remove(folder)
    if not callable(getattr(module, "build", None)):
        raise ModelError(f"{path} defines no build() function returning an mbs.System")
    return module


def script_failure(exc: BaseException, path) -> str:
    """``Type: message (line N)`` of an exception raised by the user's script at ``path``
    (the innermost line of that file in the traceback)."""
    if isinstance(exc, SyntaxError):  # its message names the file and line
        return f"{type(exc).__name__}: {exc}"
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == Path(path).resolve():
            line = frame.lineno
    return f"{type(exc).__name__}: {exc}" + (f" (line {line})" if line else "")


def load_example(name_or_path) -> tuple[ModuleType, dict, dict, str]:
    """(module, recommended settings, viz options, title) of a registered name or a script."""
    text = str(name_or_path)
    if text.replace("_", "-") in EXAMPLES and not Path(text).exists():
        text = text.replace("_", "-")  # the example's module name (heavy_top.py)
    if text in EXAMPLES:
        entry = EXAMPLES[text]
        path = example_path(text)
        if not path.is_file():
            raise ModelError(f"example {text!r} is registered but its module {path.name} is "
                             f"not in {path.parent}")
        module = load_module(path)
        recommended = {**DEFAULT_SETTINGS, **entry.recommended,
                       **getattr(module, "RECOMMENDED", {})}
        viz = {**entry.viz, **getattr(module, "VIZ", {})}
        return module, recommended, viz, entry.title
    if text.endswith(".json"):
        return _json_model(text)
    if text.endswith(".py") or Path(text).is_file():
        module = load_module(text)
        recommended = {**DEFAULT_SETTINGS, **getattr(module, "RECOMMENDED", {})}
        title = (module.__doc__ or Path(text).stem).strip().splitlines()[0]
        return module, recommended, dict(getattr(module, "VIZ", {})), title
    raise ModelError(f"unknown example {text!r}; available: {', '.join(EXAMPLES)} (or give "
                     f"the path of a script defining build() or of a model.json)")


def _json_model(path: str) -> tuple[ModuleType, dict, dict, str]:
    """A model saved with mbs.save_system(), wrapped like an example module."""
    from mbs.serialization import load_system

    if not Path(path).is_file():
        raise ModelError(f"model file {path!r} does not exist")
    load_system(path)  # validate now, with a clear error for a malformed file
    module = ModuleType(Path(path).stem)
    module.build = lambda: load_system(path)
    return module, dict(DEFAULT_SETTINGS), {}, f"model {Path(path).name}"
