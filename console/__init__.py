"""The operator-facing side: the Textual app and the headless CLI. Renders what backend computes."""
