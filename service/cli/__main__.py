"""``python -m service.cli``: the ``pdwatt`` command."""

import sys

from service.cli.app import main

sys.exit(main())
