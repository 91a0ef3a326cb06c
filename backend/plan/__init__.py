"""The plan: what the operator is about to launch, and whether it may be launched.

Owns the run spec and its presets, the rule catalog (data) and the checks that apply it, the derived
numbers (memory, parameter counts, batch arithmetic), the submission a launch sends (argv, env, id),
deep validation against the real Megatron/SGLang code where it is installed, and the plan view-model
(one JSON-able evaluation the plan view draws). Pure: no network, no Ray.
"""
