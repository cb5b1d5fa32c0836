"""The exit no hook sees: a ``raise SystemExit(n)`` in the main module's top level.

``sys.exit``, ``exit()`` and the exception hooks are chained by the lifecycle; a ``SystemExit``
raised by the script itself reaches the interpreter without passing any of them, and the
interpreter keeps no trace of its status for exit handlers. So at ``start()`` this module keeps
the main module's frame: at exit, a frame whose last instruction is a ``raise`` ended by an
exception no hook saw (a ``SystemExit``; any other exception passes ``sys.excepthook`` or leaves
``sys.last_type``). Its status is read where it can be:

- Python 3.12+: ``sys.monitoring`` watches the calls of the main module's own code (each call
  site is disabled after its first call unless it builds a ``SystemExit``), so the argument of
  ``raise SystemExit(main())`` is seen as it is built; nothing else is watched, at no cost after
  the first pass.
- Python 3.11: the raise site is read: a constant (``raise SystemExit(2)``) or a module-level
  name (``raise SystemExit(CODE)``); a call's result (``raise SystemExit(main())``) is unknown.
"""

from __future__ import annotations

import dis
import sys
import threading
from types import CodeType, FrameType
from typing import Any

UNKNOWN = object()  # a raise whose status could not be read
_TOOL_IDS = (4, 3)  # sys.monitoring tool ids tried, after the predefined debugger..profiler

_frame: FrameType | None = None  # the main module's frame, while it runs and after
_built: tuple[int, int] | None = None  # (offset of the SystemExit call, its status) on 3.12+


def watch() -> None:
    """Keep the main thread's ``__main__`` module frame (once), and on 3.12+ watch its calls."""
    global _frame
    if _frame is not None:
        return
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    found = None
    while frame is not None:  # the outermost: under ``python -m`` runpy's frames sit above it
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            found = frame
        frame = frame.f_back
    if found is None:
        return
    _frame = found
    if sys.version_info >= (3, 12):
        _monitor(found.f_code)


def raised() -> tuple[bool, Any]:
    """Whether the main module ended by an exception rather than by running to its end, and
    the status of a ``SystemExit`` it raised itself (an int, or ``UNKNOWN``: raised deeper, or
    a status that cannot be read). False while the module still runs."""
    frame = _frame
    if frame is None or frame.f_lasti < 0:
        return False, UNKNOWN
    steps = [i for i in dis.get_instructions(frame.f_code) if i.offset <= frame.f_lasti]
    if not steps or steps[-1].opname.startswith("RETURN"):  # (a call's f_lasti: in its caches)
        return False, UNKNOWN
    if steps[-1].opname != "RAISE_VARARGS":
        return True, UNKNOWN  # the exception came out of a call
    if _built is not None and _built[0] == _call_before(steps):
        return True, _built[1]
    return True, _read_site(steps, frame)


def _status(value: Any) -> int:
    """The process status a SystemExit with this ``code`` gives."""
    if value is None:
        return 0
    if isinstance(value, int):
        return int(value)
    return 1  # printed, exit status 1


def _call_before(steps: list[dis.Instruction]) -> int:
    """The offset of the call whose result the raise at ``steps[-1]`` raises (-1: none)."""
    for ins in reversed(steps[:-1]):
        if ins.opname == "CALL":
            return ins.offset
        if ins.opname not in ("CACHE", "PRECALL"):
            return -1
    return -1


def _read_site(steps: list[dis.Instruction], frame: FrameType) -> Any:
    """The status of ``raise SystemExit`` / ``(CONST)`` / ``(NAME)`` read off the code."""
    ops = [i for i in steps[:-1] if i.opname not in ("CACHE", "PRECALL", "PUSH_NULL")]
    if ops and ops[-1].opname in ("LOAD_NAME", "LOAD_GLOBAL") and ops[-1].argval == "SystemExit":
        return 0  # a bare ``raise SystemExit``
    if len(ops) < 3 or ops[-1].opname != "CALL" or ops[-1].arg != 1:
        return UNKNOWN
    arg, exc = ops[-2], ops[-3]
    if exc.opname not in ("LOAD_NAME", "LOAD_GLOBAL") or exc.argval != "SystemExit":
        return UNKNOWN
    if arg.opname == "LOAD_CONST":
        return _status(arg.argval)
    if arg.opname in ("LOAD_NAME", "LOAD_GLOBAL") and arg.argval in frame.f_globals:
        return _status(frame.f_globals[arg.argval])
    return UNKNOWN


def _monitor(code: CodeType) -> None:
    """Watch ``code``'s calls for one that builds a SystemExit (Python 3.12+)."""
    mon: Any = getattr(sys, "monitoring", None)
    if mon is None:
        return
    tool = next((t for t in _TOOL_IDS if mon.get_tool(t) is None), None)
    if tool is None:
        return  # every spare id is in use (a debugger, a coverage tool): read the site instead
    disable = mon.DISABLE

    def on_call(called: CodeType, offset: int, target: object, arg0: object) -> object:
        global _built
        if called is not code:
            return disable
        if isinstance(target, type) and issubclass(target, SystemExit):
            _built = (offset, _status(None if arg0 is mon.MISSING else arg0))
            return None
        return disable

    mon.use_tool_id(tool, "rlpulse")
    mon.register_callback(tool, mon.events.CALL, on_call)
    mon.set_local_events(tool, code, mon.events.CALL)
