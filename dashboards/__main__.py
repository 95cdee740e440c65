"""``python -m dashboards RUN_DIR [RUN_DIR ...]``: render a report by hand."""

import sys

from dashboards.report import main

sys.exit(main())
