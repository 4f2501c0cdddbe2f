"""The pure scheduler model: event batches in, frozen Snapshots out (see core.py)."""

from gmpmon.model.core import Model

__all__ = ["Model"]
