"""The Textual TUI of gmpmon (installed as gmpmon.tui)."""
