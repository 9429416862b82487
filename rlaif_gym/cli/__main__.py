"""`python -m rlaif_gym.cli ...`: the `rlaif-gym` command (as `python -m rlaif_gym`)."""

import sys

from . import main

sys.exit(main())
