"""The demo: a loopback Ray cluster and a simulated miles trainer, for `ultra-console demo` and the tests.

Everything it runs is labelled SIMULATED; it stands in only for what cannot run here (GPUs, miles' trainer).
"""
