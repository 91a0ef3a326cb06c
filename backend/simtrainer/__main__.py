"""`python -m backend.simtrainer <miles train.py argv>`."""

import sys

from backend.simtrainer.driver import main

sys.exit(main())
