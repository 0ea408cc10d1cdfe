"""The ``loopbench`` command line: one module per subcommand family."""
