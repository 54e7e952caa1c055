"""``python -m pipeline``: see pipeline/cli.py."""
import sys

from .cli import main

sys.exit(main())
