"""ultra-console's headless core: specs, rules, submissions, Ray, logs, metrics. Never imports Textual."""
