"""A clear error when an executor's Python lacks riverbed, instead of a bare ModuleNotFoundError.

PySpark ships the data source's objects (the DataSource, its reader, the partitions) to
executors with cloudpickle, which pickles a class by reference: on an executor whose
Python has no riverbed, unpickling the read function fails inside PySpark's worker with
``ModuleNotFoundError: No module named 'riverbed'`` and nothing says what to do.

So those classes pickle through :class:`ExecutorImportCheck`: ``__reduce__`` names a small
function that cloudpickle ships *by value* (its module is not importable, see
``_restore_function``), with the class's module, name and pickled state. On the executor
that function imports the module itself and, when the import fails, raises a
RuntimeError saying which Python lacks riverbed and how to install it.
"""

from __future__ import annotations

from typing import Any

from pyspark import cloudpickle

#: What the executor says when riverbed is missing (``{python}``, ``{error}`` filled in).
MISSING_MESSAGE = (
    "riverbed is not installed on this Spark executor's Python ({python}: {error}): "
    "install the wheel built by `make wheel` into the Python that spark.pyspark.python / "
    "PYSPARK_PYTHON names on every worker (pip install dist/riverbed-*.whl), or pass it "
    "with --py-files / spark.submit.pyFiles"
)

# The restoring function's source, compiled into a module name that is never imported:
# cloudpickle pickles a function of a module missing from sys.modules by value, so the
# executor runs it without importing riverbed first.
_RESTORE_SOURCE = """
def restore(module, name, state, message):
    import importlib
    import pickle
    import sys

    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise RuntimeError(message.format(python=sys.executable, error=exc)) from None
    obj = cls.__new__(cls)
    obj.__dict__.update(pickle.loads(state))
    return obj
"""
_RESTORE_MODULE = "riverbed_spark_executor_import_check"


def _restore_function() -> Any:
    namespace: dict[str, Any] = {"__name__": _RESTORE_MODULE}
    exec(compile(_RESTORE_SOURCE, f"<{_RESTORE_MODULE}>", "exec"), namespace)
    return namespace["restore"]


_restore = _restore_function()


class ExecutorImportCheck:
    """Mixin: instances unpickle through ``_restore`` (a clear error without riverbed).

    The state is the instance's ``__getstate__()`` (a dict), pickled on its own so that
    nothing in the outer pickle refers to a riverbed module."""

    def __reduce__(self) -> tuple[Any, ...]:
        cls = type(self)
        state = self.__getstate__() or {}  # None for an empty __dict__
        if not isinstance(state, dict):  # a class with __slots__ would need more
            raise TypeError(f"{cls.__qualname__} must keep its state in __dict__")
        # cloudpickle as PySpark itself pickles (the state may hold what plain pickle cannot)
        payload = cloudpickle.dumps(state)  # type: ignore[no-untyped-call]
        return (_restore, (cls.__module__, cls.__qualname__, payload, MISSING_MESSAGE))
