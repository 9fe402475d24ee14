"""`tasoc opt --load-pass-plugin PLUGIN`: a user's passes, without installing them.

MLIR's `--load-pass-plugin` habit. PLUGIN is a Python file (`my_passes.py`, or any
path with a `/`) or the name of an importable module (`my_package.passes`). It is
imported, and every `ModulePass` subclass it *defines* (not the ones it imports) that
is not abstract and has a `name` becomes a pass of the pipeline under that name. A
file is imported as the module `tasoc_plugins.<stem>`, so the pass classes are
ordinary module members (their type hints resolve, they pickle by name).

Every way this can fail is a one-line DriverError naming PLUGIN: the file or module
is missing, importing it raises (the exception's type and message, no traceback), it
defines no pass, or a pass takes a name already registered.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Mapping
from types import ModuleType

from xdsl.passes import ModulePass

from tasoc.driver.errors import DriverError, one_line

FILE_MODULE_PACKAGE = "tasoc_plugins"
"""The package name a plugin file is imported under (`tasoc_plugins.my_passes`)."""


def _is_file(plugin: str) -> bool:
    return plugin.endswith(".py") or os.sep in plugin or "/" in plugin


def _import_file(path: str) -> ModuleType:
    if not os.path.isfile(path):
        raise DriverError(f"cannot load pass plugin '{path}': no such file")
    stem = os.path.splitext(os.path.basename(path))[0]
    name = f"{FILE_MODULE_PACKAGE}.{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DriverError(f"cannot load pass plugin '{path}': not a Python file")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as `import` does: dataclasses and `get_type_hints`
    # look the module up by name while the class bodies execute.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import(plugin: str) -> ModuleType:
    try:
        if _is_file(plugin):
            return _import_file(plugin)
        return importlib.import_module(plugin)
    except DriverError:
        raise
    except ModuleNotFoundError as err:
        if err.name == plugin:
            raise DriverError(f"cannot load pass plugin '{plugin}': no such module") from None
        raise DriverError(f"cannot load pass plugin '{plugin}': {_exception(err)}") from None
    except Exception as err:  # the plugin's own code failed: whatever it raised is its
        raise DriverError(f"cannot load pass plugin '{plugin}': {_exception(err)}") from None


def _exception(err: BaseException) -> str:
    detail = one_line(str(err))
    return f"{type(err).__name__}: {detail}" if detail else type(err).__name__


def defined_passes(module: ModuleType) -> dict[str, type[ModulePass]]:
    """The concrete ModulePass subclasses `module` defines, by their `name`."""
    return {
        member.name: member
        for member in vars(module).values()
        if inspect.isclass(member)
        and issubclass(member, ModulePass)
        and member.__module__ == module.__name__
        and not inspect.isabstract(member)
        and isinstance(getattr(member, "name", None), str)
    }


def load_pass_plugin(plugin: str, registered: Mapping[str, object]) -> dict[str, type[ModulePass]]:
    """Import `plugin` and return its passes by name; DriverError if it cannot be
    imported, defines none, or one's name is already in `registered`."""
    passes = defined_passes(_import(plugin))
    if not passes:
        raise DriverError(
            f"pass plugin '{plugin}' defines no pass (a ModulePass subclass with a name)"
        )
    for name in passes:
        if name in registered:
            raise DriverError(
                f"pass plugin '{plugin}' defines pass '{name}', a name already registered"
            )
    return passes
