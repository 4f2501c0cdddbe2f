"""gmpmon: watch the Go scheduler (G/M/P) of a running Go program from outside, with eBPF."""

__version__ = "0.1.0"
