"""`python -m rlaif_gym ...`: the `rlaif-gym` command, for environments without its script on PATH."""

import sys

from .cli import main

sys.exit(main())
