"""Recipe presets, as data (TOML). One file per variant; the file stem is the preset name."""
