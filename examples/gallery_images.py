"""Regenerate the gallery pictures (one small PNG per example) from the examples themselves.

    python examples/gallery_images.py docs/gallery            # all available examples
    python examples/gallery_images.py docs/gallery heavy-top  # some of them

Each example runs with its recommended solver and step size up to ``min(t_end, 3 s)``; the
picture shows the state at 60 % of that time with the example's animation options.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import mbs
from mbs.gallery import EXAMPLES, available, load_example


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("names", nargs="*", help=f"examples (default: all of {list(EXAMPLES)})")
    parser.add_argument("--resolution", default="400x300", help="WIDTHxHEIGHT")
    parser.add_argument("--max-time", type=float, default=3.0, help="longest simulated time")
    args = parser.parse_args(argv)
    from mbs import viz

    width, height = (int(v) for v in args.resolution.split("x"))
    for name in args.names or [n for n in EXAMPLES if available(n)]:
        module, recommended, options, title = load_example(name)
        t_end = min(recommended["t_end"], args.max_time)
        h = recommended["h"]
        t_end = h * max(1, round(t_end / h))
        solution = mbs.simulate(module.build().compile(), recommended["solver"], h=h,
                                t_end=t_end)
        path = args.folder / f"{name}.png"
        viz.snapshot(solution, path, time=0.6 * t_end, resolution=(width, height), title=name,
                     **options)
        print(f"{path}: {title}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
