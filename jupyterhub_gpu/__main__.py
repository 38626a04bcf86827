"""``python -m jupyterhub_gpu``: the ``jupyterhub-gpu`` command."""

import sys

from .cli import main

sys.exit(main())
