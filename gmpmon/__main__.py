from gmpmon.cli import entry

entry()
