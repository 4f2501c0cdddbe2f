"""The pure scheduler model: event batches in, frozen Snapshots out (see core.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gmpmon.model.core import Model

__all__ = ["Model"]


def __getattr__(name: str) -> Any:
    # Imported on first use: a reader of one model module (`gmpmon ps` needs only
    # model.runtime's hist_stats) does not pay for importing the whole model.
    if name == "Model":
        from gmpmon.model.core import Model

        return Model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
