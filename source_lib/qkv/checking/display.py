"""Short failures in notebooks: a Hint is shown as its one sentence, without a traceback."""
from qkv.checking.hints import Hint


def _show_hint(shell, etype, value, tb, tb_offset=None):
    # A Hint is the whole message: a traceback through the checking code would only bury it (and
    # would print the hidden tests' source into the student's feedback).
    short = [f"\x1b[0;31m{etype.__name__}\x1b[0m: {value}"]
    shell._showtraceback(etype, value, short)  # IPython leaves displaying a custom traceback to us
    return short


def install_short_hints():
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((Hint,), _show_hint)
