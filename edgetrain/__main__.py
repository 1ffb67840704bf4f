"""`python -m edgetrain`."""

from edgetrain.cli import main

main()
