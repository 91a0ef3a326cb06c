"""Signals: what a run says about itself, turned into facts an operator can read.

Owns the log grammar (every miles/slime line shape), the spooled log store with its search and filters,
metric records and series (immutable snapshots for the UI), miles' structured outputs (`events/`,
`dashboard/`), derived signals (throughput, ETA), alerts (rules as data) and the run monitor that ties
them together. Nothing here talks to Ray; callers feed it text.
"""
