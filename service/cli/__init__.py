"""The ``pdwatt`` command line (:mod:`service.cli.app`), one module per group of
sub-commands."""
