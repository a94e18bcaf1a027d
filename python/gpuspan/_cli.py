"""The ``gpuspan`` command of the wheel: runs the Rust command line in this process."""

import signal
import sys


def main():
    from . import _native

    # As the native binary: Ctrl-C ends `gpuspan watch` at once.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.cli_main(["gpuspan", *sys.argv[1:]]))
