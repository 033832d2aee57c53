"""``python -m standin ARGS``: run the stand-in from the package (hosts run the one-file bundle)."""

from __future__ import annotations

import sys

from standin.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
