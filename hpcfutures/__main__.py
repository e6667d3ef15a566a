"""``python -m hpcfutures COMMAND``: the ``hpcfutures`` command (see ``_cli``)."""

import sys

from ._cli import main

sys.exit(main())
