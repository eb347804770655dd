"""ddprun's start-up hook for the Python programs it launches.

ddprun puts this directory first on its workers' PYTHONPATH
(DDPRUN_PYTHON_HOOKS=0 in ddprun's environment turns that off), so Python
runs this file as every process of a rank starts, without the program's
help. It starts the flight recorder's answering thread (ddprun_fr.py),
then runs the sitecustomize this one shadows (the next on sys.path: the
user's, or the distribution's), as Python would have: its errors are
reported by Python's site module as before.
"""

import os
import sys


def _ddprun_start():
    try:
        import ddprun_fr
        ddprun_fr.start()
    except Exception:  # never in the program's way
        pass


def _ddprun_chain():
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path
            if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = mod
    spec.loader.exec_module(mod)


_ddprun_start()
_ddprun_chain()
