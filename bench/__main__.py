"""``python -m bench`` is the ``bench`` command."""

from bench.cli import main

main()
