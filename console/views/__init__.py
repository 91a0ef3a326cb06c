"""Top-level views of the app, one per ContentSwitcher pane (plan, run, logs, events)."""
