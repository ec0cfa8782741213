"""`python -m mixer.export_occcanine RUN_DIR OUT_DIR`, kept at the name the README gives;
the module lives in mixer.cli.export_occcanine."""

import sys

from mixer.cli.export_occcanine import export, main

__all__ = ["export", "main"]

if __name__ == "__main__":
    from mixer.cli.parsing import run_main

    run_main(main, sys.argv[1:])
