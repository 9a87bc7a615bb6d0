"""``python -m lagsched_dev``: the same as ``lagsched-dev`` (scripts/bootstrap.sh installs that command
into a checkout's virtualenv; the tooling is not part of the lagsched wheel)."""

import sys

from lagsched_dev.cli import main

sys.exit(main())
