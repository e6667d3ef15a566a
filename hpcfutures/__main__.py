"""``python -m hpcfutures run|info``."""

import sys

from ._cli import main

sys.exit(main())
