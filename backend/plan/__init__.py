"""The plan: what the operator is about to launch, and whether it may be launched.

Owns the run spec and its presets (`spec`, `variants`, `spec_edit`, `run_modes`), the rule catalog as data
(`catalog`) and its checks by catalog section (`checks/`), the numbers a layout implies (`sizing`,
`derived`), the submission a launch sends (`submission`: argv, env, id), deep validation against the real
Megatron/SGLang code where it is installed (`deep/`), and the plan view-model (`evaluation`, `view_start`,
`preview_process`: one JSON-able evaluation the plan view draws). Pure: no network, no Ray.
"""
