"""Signals: what a run says about itself, turned into facts an operator can read.

Owns the log grammar (every miles/slime line shape, `grammar`; every version's actor names, `actors`), the
spooled log store (`store`) with its search (`search`) and filters and time index (`filters`), the one way a
log comes in (`ingest`), metric records and series (`metrics`, `series`: immutable snapshots for the UI),
miles' structured outputs (`events/`, `dashboard/`: `dump_reader`), derived signals (`derived`), time units
(`clock`), alerts with rules as data, failures and blind spots included (`alerts`, `activity`), and the run
monitor that ties them together (`monitor`). Nothing here talks to Ray; callers feed it text.
"""
