"""``python -m benchmarks``: run the benchmark suite (see benchmarks/runner.py)."""

from benchmarks.runner import main

raise SystemExit(main())
