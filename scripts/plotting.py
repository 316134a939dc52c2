"""What the plot scripts share: matplotlib from Debian's python3-matplotlib (installed by
`bash scripts/install_dependencies.sh --plots`), drawing to files without a display.

When the `python3` that runs a script lacks matplotlib (a pyenv or virtual environment in front
of Debian's interpreter) and /usr/bin/python3 has it, the script runs itself again there.
"""
import os
import subprocess
import sys

DEBIAN_PYTHON = "/usr/bin/python3"


def pyplot():
    """matplotlib.pyplot with the file-only Agg backend, or a clear exit when it is missing."""
    try:
        import matplotlib
    except ImportError:
        if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and os.path.exists(DEBIAN_PYTHON):
            has_it = subprocess.run([DEBIAN_PYTHON, "-c", "import matplotlib"],
                                    capture_output=True).returncode == 0
            if has_it:
                os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON] + sys.argv)
        sys.exit("matplotlib is missing: run `bash scripts/install_dependencies.sh --plots` "
                 "(Debian's python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt
