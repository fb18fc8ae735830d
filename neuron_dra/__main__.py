"""`python -m neuron_dra`: the `neuron-dra` command."""

import sys

from neuron_dra.cli import main

sys.exit(main())
