"""`python -m fiblab.cli …` (what the launcher and torchrun run)."""

import sys

from fiblab.cli import main

sys.exit(main())
