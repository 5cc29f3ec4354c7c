"""Short failures in notebooks: a Hint is shown as its one sentence, without a traceback."""
from qkv.checking.hints import Hint


def _show_hint(shell, etype, value, tb, tb_offset=None):
    # A Hint is the whole message: a traceback through the checking code would only bury it (and
    # would print the hidden tests' source into the student's feedback).
    short = [f"\x1b[0;31m{etype.__name__}\x1b[0m: {value}"]
    shell._showtraceback(etype, value, short)  # IPython leaves displaying a custom traceback to us
    return short


def add_custom_traceback(shell, types, handler):
    """IPython's shell.set_custom_exc(types, handler), keeping the handler already set for other exceptions: IPython
    keeps a single one, so the grader's short traceback for a withheld reference and this module's for a Hint
    replaced each other, and whichever came second silenced the first."""
    types = tuple(types)
    earlier_types, earlier = tuple(shell.custom_exceptions), shell.CustomTB

    def either(shell, etype, value, tb, tb_offset=None):
        if issubclass(etype, types):
            return handler(shell, etype, value, tb, tb_offset)
        return earlier(etype, value, tb, tb_offset=tb_offset)

    shell.set_custom_exc(earlier_types + types, either)


def install_short_hints():
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and Hint not in shell.custom_exceptions:
        add_custom_traceback(shell, (Hint,), _show_hint)
