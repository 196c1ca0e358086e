"""Loading code named at run time: a user's kernel spec file, a test double for NVRTC or the GPU backend.

A reference is ``"package.module:name"`` or ``"path/file.py:name"`` (:func:`load_object`); a file is
imported under a module name of the caller's choosing (:func:`import_file`), so two files of the
same name do not replace each other in :data:`sys.modules`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def import_file(path: str | Path, module_name: str) -> ModuleType:
    """Import the Python file ``path`` as ``module_name`` (registered while it runs, as a package import is)."""
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def load_object(reference: str, module_name: str) -> Any:
    """The object ``reference`` names: ``"module:name"`` or ``"file.py:name"`` (imported as ``module_name``)."""
    target, _, attr = reference.rpartition(":")
    module = import_file(target, module_name) if target.endswith(".py") else importlib.import_module(target)
    return getattr(module, attr)
