"""`python -m backend.demo.simtrainer <miles train.py argv>`."""

import sys

from backend.demo.simtrainer.driver import main

sys.exit(main())
