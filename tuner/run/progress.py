"""A progress bar for long work: a widget in a notebook that can draw one, else text on stderr."""

from __future__ import annotations

import sys
from typing import Any


def progress_bar(**kwargs: Any) -> Any:
    """A tqdm bar; in Jupyter (with ipywidgets) the notebook's widget, where text redrawn with
    carriage returns would pile up in the cell's output."""
    try:
        import ipywidgets  # noqa: F401  (tqdm's notebook bar needs it, and fails without it)
        from tqdm.auto import tqdm
    except ImportError:
        from tqdm import tqdm
    return tqdm(file=sys.stderr, **kwargs)
