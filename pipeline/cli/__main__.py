"""`python -m pipeline.cli ...` (what torchrun runs): the same command tree as `semworld`."""

import sys

from pipeline.cli import main

sys.exit(main())
