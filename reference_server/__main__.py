"""``python -m reference_server [OPTIONS]``: parse the options, serve until stopped."""

import sys

from reference_server.cli import config_from_args, parser
from reference_server.serve import serve

serve(config_from_args(parser().parse_args()))
sys.exit(0)
