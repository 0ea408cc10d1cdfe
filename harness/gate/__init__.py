"""The CI regression gate (docs/ci.md): rules, evaluation, reports and A/B measurement.

Nothing is imported here, so that registering the ``loopbench gate`` subcommand
(:mod:`harness.cli.gate`) costs the CLI no numpy or pandas import.
"""
