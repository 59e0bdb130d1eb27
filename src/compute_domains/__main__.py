"""``python -m compute_domains`` runs the ``cdctl`` command line."""

from compute_domains.cli.entry import main

main()
