"""The TUI's widgets: one module per view, plus the status header and the help screen."""
