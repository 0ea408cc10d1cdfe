"""The CI regression gate (docs/ci.md): rules, evaluation, reports and A/B measurement.

Layers: :mod:`.rules` (rule model and YAML form) and :mod:`.evaluate` are pure;
:mod:`.samples` turns a loaded results folder into samples; :mod:`.junit` and
:mod:`.markdown` render a report; :mod:`.ab` measures two targets in
interleaved rounds; :mod:`.codes` holds the exit codes.  The ``loopbench gate``
subcommand is :mod:`harness.cli.gate`.  Nothing is imported here, so that registering
the subcommand costs the CLI no numpy or pandas import.
"""
