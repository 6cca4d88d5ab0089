"""``python -m rieszflow``: the same command line as the ``rieszflow`` script."""
import sys

from rieszflow.studies.cli import main

if __name__ == "__main__":
    sys.exit(main())
