"""A module that exits while it is imported, as a careless script would."""

import sys

sys.exit(3)
