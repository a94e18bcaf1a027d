"""``python -m gpuspan``: the ``gpuspan`` command."""

from ._cli import main

main()
