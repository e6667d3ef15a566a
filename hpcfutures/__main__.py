"""``python -m hpcfutures run|info|serve|stop``."""

import sys

from ._cli import main

sys.exit(main())
