"""Animations and printed results of the gallery examples for the documentation build.

    python docs/render_gallery.py FOLDER [NAME[=SCRIPT] ...]

Runs every registered example (:data:`mbs.gallery.EXAMPLES`), or the ones named, with its
recommended solver, step and end time, writes ``FOLDER/NAME.gif`` (a short off-screen animation
at reduced size with the example's animation options) and ``FOLDER/results.json`` (per example:
the settings, the conservation summary, the example's own report and the run time). The still
pictures of registered examples come from ``examples/gallery_images.py``; for a script given
as ``NAME=SCRIPT`` (an example not registered yet) this also writes ``FOLDER/NAME.png`` with the
same settings. ``docs/hooks.py`` runs both tools during ``mkdocs build``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import mbs
from mbs.gallery import EXAMPLES, available, load_example

RESOLUTION = (320, 240)
FRAMES = 48
FPS = 12.0


def run(name: str, folder: Path, script: str | None = None) -> dict:
    """Simulate example ``name`` and animate it; returns what the gallery page shows."""
    module, recommended, options, title = load_example(script or name)
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = module.build().compile()
        solution = mbs.simulate(model, recommended["solver"], h=recommended["h"],
                                t_end=recommended["t_end"])
    simulated = time.perf_counter() - started
    report = getattr(module, "report", None)
    from mbs import viz

    viz.animate(solution, folder / f"{name}.gif", frames=FRAMES, fps=FPS,
                resolution=RESOLUTION, progress=False, **options)
    if script is not None:  # as examples/gallery_images.py does for registered examples
        h = recommended["h"]
        t_end = h * max(1, round(min(recommended["t_end"], 3.0) / h))
        still = mbs.simulate(model, recommended["solver"], h=h, t_end=t_end)
        viz.snapshot(still, folder / f"{name}.png", time=0.6 * t_end, resolution=RESOLUTION,
                     title=name, **options)
    return {
        "title": title,
        "settings": {key: recommended[key] for key in ("solver", "h", "t_end")},
        "steps": int(len(solution.t) - 1),
        "simulation_seconds": round(simulated, 2),
        "summary": solution.conservation_summary(),
        "report": report(solution) if report is not None else None,
        "warnings": sorted({str(w.message) for w in caught}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("names", nargs="*", help="examples (default: all available)")
    args = parser.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    names = args.names or [name for name in EXAMPLES if available(name)]
    results = {}
    for entry in names:
        name, _, script = entry.partition("=")
        results[name] = run(name, args.folder, script or None)
        print(f"{name}: {results[name]['steps']} steps in "
              f"{results[name]['simulation_seconds']} s", flush=True)
    (args.folder / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
