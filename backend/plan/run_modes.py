"""The run modes a spec may ask for, in the order the plan form cycles through them.

`normal` runs the recipe as written; `debug_minimal` caps responses at rollout.debug_max_response_len
for a quick end-to-end check. Standard library only: the form reads this on the first frame.
"""

from __future__ import annotations

from typing import Literal, get_args

RunMode = Literal["normal", "debug_minimal"]
RUN_MODES: tuple[RunMode, ...] = get_args(RunMode)
