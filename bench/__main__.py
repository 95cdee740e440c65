"""``python -m bench`` is the ``bench`` command."""

from bench.cli.app import main

main()
