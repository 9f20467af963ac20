"""The package imports without torch (the numpy path) and says what is
missing when ps.torch is used without it."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_import_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import ps, numpy\n"
        "assert ps.Session and ps.Worker and issubclass(ps.InvalidArgument, ValueError)\n"
        "try:\n"
        "    import ps.torch\n"
        "except ImportError as e:\n"
        "    print('no torch:', e)\n"
        "else:\n"
        "    raise SystemExit('ps.torch imported without torch')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "no torch:" in r.stdout
